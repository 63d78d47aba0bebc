"""What only a cluster does, the Kubernetes backend's ``cluster`` facet
(:class:`dra_jupyter.types.ClusterOps`): a made claim allocated now by our allocator
(:mod:`.reserve`); a claim of the namespace read by name, any claim (one to join). Its
runs are a facet of their own (:mod:`.runs.facet`)."""

from __future__ import annotations

from dra_jupyter.kube import reserve
from dra_jupyter.kube.access import ClusterAccess
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import ClaimRecord


class KubeCluster:
    """The cluster operations of one backend (``backend.cluster``)."""

    def __init__(self, backend: ClusterAccess) -> None:
        self.backend = backend

    def reserve(self, record: ClaimRecord) -> ClaimRecord:
        """Allocate a new claim with our allocator and write it (see :mod:`.reserve`); the
        claim is deleted if that fails."""
        backend = self.backend
        try:
            return reserve.reserve(backend, record.to_object())
        except BaseException:
            claims = ClaimClient(backend.api, backend.namespace)
            backend.retrying(lambda: claims.delete(record.name))
            raise

    def find(self, name: str) -> Wire | None:
        """The claim ``name`` as the API server has it now (not the watched view, which
        holds dra-jupyter's claims only); None where there is none."""
        claims = ClaimClient(self.backend.api, self.backend.namespace)
        return self.backend.retrying(lambda: claims.get(name, "dra.request(join=...)"))
