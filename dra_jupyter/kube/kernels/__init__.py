"""GPU kernels on Kubernetes: a kernel in a pod of its own with the devices of its claim.

* :mod:`.provisioner`: the kernel provisioner (``"provisioner_name": "dra-kubernetes"``), a
  jupyter_client plug-in that the Jupyter server runs: start, restart, interrupt, stop;
* :mod:`.pods`: the kernel's objects (ResourceClaimTemplate, Secret, Pod) and their life;
* :mod:`.boot`: the pod's first process (``python3 -m dra_jupyter.kube.kernels.boot``);
* :mod:`.volumes`: the notebook's folder in the pod.
"""
