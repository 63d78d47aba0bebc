"""The placement-quality benchmark (issue 7): a seeded trace of claims that arrive and leave,
served by placement policies that use the real :class:`Allocator`, and a bound.

Modules: ``cluster`` (the simulated inventory), ``trace`` (claims over time), ``policies``
(first-fit, spreading scheduler, topology), ``bound`` (the free-repacking bound, CP-SAT),
``occupancy`` (what is in use per GPU), ``simulate`` (the event loop), ``metrics`` (what
is reported), ``report`` (tables and plot).
"""
