"""What runs in a kernel's process: which kernel this is (:mod:`.info`), the device
variables of its claims (:mod:`.environment`), a restart with devices asked of its server
(:mod:`.restarts`), and the note a GPU kernel's pod leaves for its next cell (:mod:`.notes`).

GPU kernels on Kubernetes (their pods, boot and provisioner) are in
:mod:`dra_jupyter.kube.kernels`; the server's side of them in :mod:`dra_jupyter.server`.
"""
