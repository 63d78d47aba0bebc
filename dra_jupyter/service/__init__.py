"""The shared-machine allocator service: one daemon that owns the devices and the ledger of
a machine, and the backend that talks to it.

* :mod:`~dra_jupyter.service.protocol`: the frames both sides speak (JSON lines, versioned;
  ``specification/service-protocol.md``), and how records, inventories and errors travel;
* :mod:`~dra_jupyter.service.client`: :class:`~dra_jupyter.service.client.ServiceBackend`,
  the :class:`~dra_jupyter.types.Backend` of every process that uses the service;
* :mod:`~dra_jupyter.service.daemon`: ``dra-jupyter service``, the one process that reads
  and writes the ledger (the embedded local backend, run inside it), identifies each caller
  by its kernel credentials (:mod:`~dra_jupyter.service.peer`) and enforces the policy
  (:mod:`~dra_jupyter.service.policy`). Its parts: :mod:`~dra_jupyter.service.ops` (the
  ops, dispatched from a table checked against the protocol's), :mod:`~dra_jupyter.service.line`
  (requests waiting for devices, attempts, the tick), :mod:`~dra_jupyter.service.connections`,
  :mod:`~dra_jupyter.service.watches` (the processes that hold claims) and
  :mod:`~dra_jupyter.service.access` (who may do what under the policy in force).

The client imports neither the daemon, the policy nor the local backend (an import-linter
contract): all it knows of the daemon is the protocol.
"""
