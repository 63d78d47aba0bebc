"""dra-jupyter for JupyterHub: spawn-form choices with live device counts, and spawners.

* :mod:`dra_jupyter.hub.choices` (pure): the choices a cluster's or a machine's devices
  offer (one per device class and model at 1, 2, 4, ... devices, per MIG profile, and "no
  GPU"), each with how many could be allocated now, counted with our allocator
  (:mod:`~dra_jupyter.hub.counting`, :mod:`~dra_jupyter.hub.layout`); an admin's rules
  (:class:`~dra_jupyter.hub.choices.ChoicePolicy`, ``c.DRAProfiles`` in
  :mod:`~dra_jupyter.hub.config`); KubeSpawner ``profile_list`` entries.
* :mod:`dra_jupyter.hub.localspawner`: one shared machine, the shared-machine service's devices in
  the spawn form of LocalProcessSpawner (``DRALocalSpawner``) or any spawner that runs the
  server as its user (``DRASpawnerMixin``); the form itself in :mod:`~dra_jupyter.hub.form`.
* :mod:`dra_jupyter.hub.kubespawner`: KubeSpawner with DRA (``DRAKubeSpawner``), the
  spawn's progress in :mod:`~dra_jupyter.hub.progress`, the pod's claim in
  :mod:`~dra_jupyter.hub.pod`.

Importing this package imports neither JupyterHub nor the allocator.
"""
