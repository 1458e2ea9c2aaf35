"""Kafka's DescribeAcls, CreateAcls and DeleteAcls on the metadata log's ``acl`` records.

Without an authorizer (``authorizer = ""``) each answers SECURITY_DISABLED, as
Kafka does.  Who may call them is checked by
:mod:`~sparklog.broker_lite.kafka.authorize` (DESCRIBE or ALTER on the cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import acl
from sparklog.broker_lite.kafka.messages import errno_of, make, nested
from sparklog.errors import InvalidRequestError, SecurityDisabledError, SparklogError
from sparklog.security import acls

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        CreateAclsRequest,
        CreateAclsResponse,
        DeleteAclsRequest,
        DeleteAclsResponse,
        DescribeAclsRequest,
        DescribeAclsResponse,
    )
    from sparklog.broker_lite.kafka.context import HandlerContext


DISABLED = 'no authorizer is configured (broker key authorizer = ""); set authorizer = "acl"'


def _name(kind: str, number: int) -> str:
    found = acl.BY_NUMBER[kind].get(int(number))
    if found is None:
        raise InvalidRequestError(f"unknown ACL {kind} {int(number)}")
    return found


class AclFilter(Protocol):
    """What a DescribeAcls request or a DeleteAcls filter names (kio's classes of every
    version; ``pattern_type_filter`` is absent before v1, meaning LITERAL)."""

    @property
    def resource_type_filter(self) -> int: ...

    @property
    def resource_name_filter(self) -> str | None: ...

    @property
    def principal_filter(self) -> str | None: ...

    @property
    def host_filter(self) -> str | None: ...

    @property
    def operation(self) -> int: ...

    @property
    def permission_type(self) -> int: ...


def filter_of(request: AclFilter) -> dict[str, Any]:
    """A DescribeAcls request or DeleteAcls filter as :func:`acl.matches_filter` takes it."""
    return {
        "resource_type": _name("resource_type", request.resource_type_filter),
        "pattern_type": _name("pattern_type", getattr(request, "pattern_type_filter", 3)),
        "name": request.resource_name_filter,
        "principal": request.principal_filter,
        "host": request.host_filter,
        "operation": _name("operation", request.operation),
        "permission": _name("permission", request.permission_type),
    }


def _numbers(value: dict[str, str]) -> dict[str, Any]:
    return {
        "resource_type": acl.RESOURCE_TYPES[value["resource_type"]],
        "resource_name": value["name"],
        "pattern_type": acl.PATTERN_TYPES[value["pattern_type"]],
        "resource_pattern_type": acl.PATTERN_TYPES[value["pattern_type"]],
        "principal": value["principal"],
        "host": value["host"],
        "operation": acl.OPERATIONS[value["operation"]],
        "permission_type": acl.PERMISSIONS[value["permission"]],
    }


def handle_describe_acls(ctx: HandlerContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    cls = load_response_schema(29, ctx.api_version)
    if not acl.enabled(ctx.broker):
        return make(
            cls,
            throttle_time=0,
            error_code=SecurityDisabledError.errno,
            error_message=DISABLED,
            resources=(),
        )
    resource_cls = nested(cls, "DescribeAclsResource")
    description_cls = nested(cls, "AclDescription")
    try:
        flt = filter_of(request)
    except SparklogError as exc:
        return make(
            cls, throttle_time=0, error_code=errno_of(exc), error_message=str(exc), resources=()
        )
    grouped: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for value in ctx.broker.root.metadata.image().acls.values():
        if acl.matches_filter(value, flt):
            where = (value["resource_type"], value["name"], value["pattern_type"])
            grouped.setdefault(where, []).append(value)
    resources = tuple(
        make(
            resource_cls,
            resource_type=acl.RESOURCE_TYPES[rtype],
            resource_name=name,
            pattern_type=acl.PATTERN_TYPES[pattern],
            acls=tuple(make(description_cls, **_numbers(v)) for v in values),
        )
        for (rtype, name, pattern), values in sorted(grouped.items())
    )
    return make(cls, throttle_time=0, error_code=0, error_message=None, resources=resources)


def handle_create_acls(ctx: HandlerContext, request: CreateAclsRequest) -> CreateAclsResponse:
    cls = load_response_schema(30, ctx.api_version)
    result_cls = nested(cls, "AclCreationResult")
    enabled = acl.enabled(ctx.broker)
    results: list[Any] = []
    bindings: list[dict[str, str]] = []
    for creation in request.creations:
        if not enabled:
            results.append(
                make(result_cls, error_code=SecurityDisabledError.errno, error_message=DISABLED)
            )
            continue
        try:
            bindings.append(
                acl.binding(
                    _name("resource_type", creation.resource_type),
                    creation.resource_name,
                    creation.principal,
                    _name("operation", creation.operation),
                    _name("permission", creation.permission_type),
                    _name("pattern_type", getattr(creation, "resource_pattern_type", 3)),
                    creation.host,
                )
            )
            results.append(make(result_cls, error_code=0, error_message=None))
        except SparklogError as exc:
            results.append(make(result_cls, error_code=errno_of(exc), error_message=str(exc)))
    if bindings:
        try:
            acls.create(ctx.broker.root.metadata, bindings)
        except SparklogError as exc:
            results = [make(result_cls, error_code=errno_of(exc), error_message=str(exc))] * len(
                results
            )
    return make(cls, throttle_time=0, results=tuple(results))


def handle_delete_acls(ctx: HandlerContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    cls = load_response_schema(31, ctx.api_version)
    result_cls = nested(cls, "DeleteAclsFilterResult")
    matching_cls = nested(cls, "DeleteAclsMatchingAcl")
    if not acl.enabled(ctx.broker):
        return make(
            cls,
            throttle_time=0,
            filter_results=tuple(
                make(
                    result_cls,
                    error_code=SecurityDisabledError.errno,
                    error_message=DISABLED,
                    matching_acls=(),
                )
                for _ in request.filters
            ),
        )
    try:
        filters = [filter_of(f) for f in request.filters]
        matched = acls.delete(ctx.broker.root.metadata, filters)
    except SparklogError as exc:
        return make(
            cls,
            throttle_time=0,
            filter_results=tuple(
                make(result_cls, error_code=errno_of(exc), error_message=str(exc), matching_acls=())
                for _ in request.filters
            ),
        )
    return make(
        cls,
        throttle_time=0,
        filter_results=tuple(
            make(
                result_cls,
                error_code=0,
                error_message=None,
                matching_acls=tuple(
                    make(matching_cls, error_code=0, error_message=None, **_numbers(v))
                    for v in found
                ),
            )
            for found in matched
        ),
    )
