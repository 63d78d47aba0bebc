"""``dra.run`` on Kubernetes: the backend's runs facet (:mod:`.facet`: each run planned, then
started, found again by its labels), one pod with a claim of the session (:mod:`.run`,
:mod:`.podrun`), a Job of one or more pods (:mod:`.jobs`, :mod:`.jobrun`, :mod:`.jobstatus`),
a JobSet where installed (:mod:`.jobsets`); each a :class:`dra_jupyter.types.runs.Run`.
:mod:`.stopped` says which device was taken out when a run's pod was evicted for a device
taint.
"""
