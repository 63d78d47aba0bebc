"""The ``dra-jupyter`` command line: :func:`main`, and a module for each group of commands.

    dra-jupyter allocate -f OBJECTS.yaml [--strategy first-fit|topology] [--node NODE]
                         [-o yaml|json]
    dra-jupyter explain  -f OBJECTS.yaml [--strategy ...] [--node NODE] [-o text|json]
    dra-jupyter explain  KEY=VALUE... [--inventory ...] [--ledger ...] [-o text|json]
    dra-jupyter devices | request KEY=VALUE... | claims | release NAME...   (this machine)
    dra-jupyter taint DEVICE --effect NoSchedule|NoExecute --reason TEXT [--key K]
    dra-jupyter taint --list [--history] | untaint DEVICE [--key K]
    dra-jupyter demo     [--service]
    dra-jupyter service  [--config FILE.toml] [--socket PATH] [--import-ledger LEDGER]
    dra-jupyter publish-slices --inventory NAME [--nodes N] [--kubeconfig PATH]

The groups: :mod:`.objects` (``allocate``, ``explain -f``: objects of a cluster, offline),
:mod:`.local` (this machine's devices through the API), :mod:`.taints` (an admin's
taints on devices, through the API), :mod:`.demo`, :mod:`.service` (the
shared-machine daemon), :mod:`.kube` (a cluster); :mod:`.main` parses and dispatches by
name from their tables.

Exit codes, by the class of the error (its ``exit_code``, :mod:`dra_jupyter.errors`): 0
allocated (or explained), 1 no allocation exists (:class:`AllocationError`), 2 invalid
input, an unknown claim or another user's, 3 something we depend on failed
(:class:`UnavailableError`: the Kubernetes API server, the ledger, NVML), 4 an internal
error (a bug: the traceback follows). Errors go to standard error: for 2 and 3 one line
(``error: ...``, at most :data:`~dra_jupyter.cli.main.MAX_LINE` characters); warnings
(:class:`DraJupyterWarning`) one line each (``warning: ...``), each once.
"""

from dra_jupyter.cli.main import main

__all__ = ["main"]
