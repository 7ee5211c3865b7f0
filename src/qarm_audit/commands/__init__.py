"""The commands the library offers (``audit``, ``diff``, ``explain``): each runs the stages
in order and assembles one report model."""
