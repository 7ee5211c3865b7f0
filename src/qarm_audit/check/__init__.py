"""Stage 5, check: every shipped tensor against its module's resolved scheme.

Takes modules and memberships; gives each module's shipped spelling, the cross-check's
refusals, the grouping of modules alike, and (on request) the scalar scale probe.
"""
