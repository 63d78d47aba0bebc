"""The Kubernetes side of dra-jupyter.

The only package that imports the ``kubernetes`` client (an optional extra:
``pip install 'dra-jupyter[kubernetes]'``); everything else stays free of it, and the CLI
imports this package only for the commands that talk to a cluster.

* :mod:`dra_jupyter.kube.simulate`: pure; an inventory spread over N simulated nodes
  (Node objects, their ResourceSlices, the DeviceClasses);
* :mod:`dra_jupyter.kube.connect`: credentials (``--kubeconfig``, in-cluster, ``$KUBECONFIG``,
  ``~/.kube/config``) and API errors as :class:`~dra_jupyter.errors.ClusterError`;
* :mod:`dra_jupyter.kube.publish`: ``dra-jupyter publish-slices``, acting as the DRA driver
  of simulated nodes;
* :mod:`dra_jupyter.kube.claims`: ResourceClaims in a namespace, labelled per owner and
  kernel (the storage of the coming Kubernetes backend), RBAC refusals in one line;
* :mod:`dra_jupyter.kube.watching`: views of the cluster kept by listing once and then
  watching (a reflector per kind, namespace and selector, shared in a process);
* :mod:`dra_jupyter.kube.pods`: a Pod that uses claims (what ``dra.run`` will launch) and
  waiting for kube-scheduler to place it, with its reason while it cannot;
* :mod:`dra_jupyter.kube.runs`: ``dra.run`` in one pod with a claim of the session, or as
  a Job (a JobSet) of one or more pods, each a :class:`dra_jupyter.types.runs.Run`;
* :mod:`dra_jupyter.kube.kernels`: GPU kernels, each in a pod of its own (the kernel
  provisioner, the pod's objects and its first process).
"""
