"""``dra.run`` on Kubernetes: one pod with a claim of the session (:mod:`.run`,
:mod:`.podrun`), a Job of one or more pods (:mod:`.jobs`, :mod:`.jobrun`, :mod:`.jobstatus`),
a JobSet where installed (:mod:`.jobsets`); each a :class:`dra_jupyter.types.runs.Run`, found
again by its labels. :mod:`.stopped` says which device was taken out when a run's pod was
evicted for a device taint.
"""
