"""Sharing one machine fairly, pure (no I/O): :mod:`~dra_jupyter.sharing.fairshare` (who has
used less of their share, and so goes first in line) and :mod:`~dra_jupyter.sharing.reclaim`
(which idle holders give way to a waiting request, warned first, and how often they may
Keep). The service reads the usage book, the sampler and its line, and acts on what these
decide. On a cluster, :mod:`~dra_jupyter.sharing.gpushare` turns ``share="mps"`` or
``share="time-slicing"`` and their limits into the opaque config of the GPU's driver."""
