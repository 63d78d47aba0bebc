"""Whether selectors hold on devices: :class:`SelectorResults`, an allocator's CEL results.

A selector's result on a device is kept per expression and device in the catalog, and
devices that publish the same values of what a fast selector reads share one result
(:mod:`~dra_jupyter.allocator.reads`). A CEL runtime error is a result too: its problem, a
string, which the search raises only if it reaches the device.
"""

from __future__ import annotations

from dra_jupyter.allocator.cache import Catalog
from dra_jupyter.allocator.reads import read_values
from dra_jupyter.allocator.scan import Test, shared_by_values
from dra_jupyter.allocator.search import request_path
from dra_jupyter.errors import SelectorError
from dra_jupyter.model.objects import Device, DeviceClass, DeviceID, ExactRequest, ResourceClaim
from dra_jupyter.selectors import (
    CelEvaluationError,
    CompiledSelector,
    DeviceView,
    compile_selector,
    device_view,
)


class SelectorResults:
    """The selectors' results on the catalog's devices, kept in the catalog (one per
    allocator: it holds nothing but the catalog)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._views: dict[int, DeviceView] = catalog.views
        self._matches: dict[tuple[str, int], bool | str] = catalog.results
        self._compiled: dict[str, CompiledSelector] = catalog.compiled

    def scan_test(
        self,
        expression: str,
        owner: DeviceClass | ResourceClaim,
        request: ExactRequest | None,
        index: int,
    ) -> Test:
        """The test of one selector of a class (``request`` None) or of a request, as the
        scan and the lists run it on a device, shared by devices of the same values read."""
        compiled = self._compiled.get(expression)
        if compiled is None:
            where = selector_path(owner, request, index)
            compiled = self._compiled[expression] = compile_selector(expression, where=where)

        # the test holds these results, which hold no test: no reference cycle
        def test(device: Device, driver: str, pool: str) -> bool | str:
            dev_id = DeviceID(driver, pool, device.name)
            return self._result(expression, device, dev_id, owner, request, index)

        return shared_by_values(compiled.reads, test)

    def _view(self, device: Device, driver: str) -> DeviceView:
        view = self._views.get(id(device))
        if view is None:
            view = device_view(
                driver,
                device.attributes,
                {k: c.value for k, c in device.capacity.items()},
                device.allow_multiple_allocations,
            )
            self._views[id(device)] = view
        return view

    def selector_holds(
        self,
        expression: str,
        device: Device,
        dev_id: DeviceID,
        owner: DeviceClass | ResourceClaim,
        request: ExactRequest | None,
        index: int,
    ) -> bool:
        """Whether selector ``index`` of a class (or of a claim's request) holds for a device.

        Results are cached per expression and device. A CEL runtime error raises
        :class:`SelectorError` naming the selector's object, field and the device.
        """
        result = self._result(expression, device, dev_id, owner, request, index)
        if isinstance(result, str):
            raise SelectorError(
                f"{selector_path(owner, request, index)}, on device {dev_id}",
                f"CEL runtime error: {result}",
                "guard optional attributes with has(...) or 'name' in device.attributes[...]",
            )
        return result

    def _result(
        self,
        expression: str,
        device: Device,
        dev_id: DeviceID,
        owner: DeviceClass | ResourceClaim,
        request: ExactRequest | None,
        index: int,
    ) -> bool | str:
        """The selector's result on the device, or the problem of its CEL runtime error."""
        key = (expression, id(device))
        result = self._matches.get(key)
        if result is not None:
            return result
        compiled = self._compiled.get(expression)
        if compiled is None:
            where = selector_path(owner, request, index)
            compiled = self._compiled[expression] = compile_selector(expression, where=where)
        reads = compiled.reads
        if reads is not None:  # devices that agree on what the selector reads share a result
            by_values = self.catalog.by_values
            values = (expression, *read_values(reads, dev_id.driver, device))
            result = by_values.get(values)
            if result is None:
                found: bool | str | None
                try:
                    found = compiled.matches_fast(
                        dev_id.driver,
                        device.attributes,
                        {k: c.value for k, c in device.capacity.items()},
                        device.allow_multiple_allocations,
                    )
                except CelEvaluationError as err:
                    found = err.problem
                if found is not None:
                    result = by_values[values] = found
        if result is None:
            try:
                result = compiled.matches(self._view(device, dev_id.driver))
            except CelEvaluationError as err:
                result = err.problem
        self._matches[key] = result
        return result

    def matches(
        self,
        cls: DeviceClass,
        request: ExactRequest,
        claim: ResourceClaim,
        device: Device,
        dev_id: DeviceID,
    ) -> bool:
        """Whether every selector of the class and of the request holds for the device."""
        for i, expr in enumerate(cls.selectors):
            if not self.selector_holds(expr, device, dev_id, cls, None, i):
                return False
        for i, expr in enumerate(request.selectors):
            if not self.selector_holds(expr, device, dev_id, claim, request, i):
                return False
        return True


def selector_path(
    owner: DeviceClass | ResourceClaim, request: ExactRequest | None, index: int
) -> str:
    """Where a selector is, for messages: its object and field."""
    if isinstance(owner, DeviceClass) or request is None:
        return f"DeviceClass {owner.name}, spec.selectors[{index}]"
    return f"ResourceClaim {owner.key}, {request_path(owner, request)}.selectors[{index}]"
