"""Stage 3, modules: tensor names grouped into the checkpoint's modules, with their operands.

Takes a checkpoint's header entries; gives one ``ModuleInfo`` per module (its operands, its
kind as far as names and ranks tell, its layout number) and the operand-name vocabulary.
"""
