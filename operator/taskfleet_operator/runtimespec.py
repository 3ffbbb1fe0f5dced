"""`spec.runtime` of a TaskQueue: which worker its image carries, Python or Node.js.

The runtime decides the worker's command and its preStop hook (`taskfleet worker` and
`taskfleet drain`, or `taskfleet-node worker` and `taskfleet-node drain`, the same flags,
environment, exit codes and runtime-file contract), and the form of a handler reference.
Everything else of the pod (grace period, metrics ports, disruption guard, dead-pod
recovery) is the same for both.

What one runtime cannot do is refused, as CEL on the CRD and again by `runtime_problem`
for the models' validators, each with one line saying what to fix.
"""

from __future__ import annotations

import re
from typing import Literal

from taskfleet_operator.modelbase import JsonDict, cel

Runtime = Literal["python", "node"]
RUNTIMES: tuple[Runtime, ...] = ("python", "node")

#: The worker and drain commands of each runtime's image (exec form, no shell).
COMMANDS: dict[Runtime, str] = {"python": "taskfleet", "node": "taskfleet-node"}

#: A Python handler: an importable module, a colon, a function (or registry) in it.
PYTHON_HANDLER_PATTERN = (
    r"^[A-Za-z_][A-Za-z0-9_]*([.][A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
)
#: A Node handler: a module specifier (``./handlers.js``, ``/app/x.mjs``, a package name
#: such as ``@acme/jobs/worker``) resolved from the worker's --app-dir, a colon, an export
#: (dotted for a nested one). Every Python reference has this form too, so this is the
#: field's pattern and the Python form is checked per runtime.
NODE_HANDLER_PATTERN = (
    r"^([.]{1,2}/|/)?[A-Za-z0-9@_~][A-Za-z0-9@_.~/+-]*"
    r":[A-Za-z_$][A-Za-z0-9_$]*([.][A-Za-z_$][A-Za-z0-9_$]*)*$"
)
HANDLER_PATTERN = NODE_HANDLER_PATTERN

PYTHON_HANDLER_MESSAGE = (
    "handler: with runtime: python give module:function importable in the image "
    "(e.g. app.tasks:resize); ./file.js:export needs runtime: node"
)
PYTHON_HANDLERS_MESSAGE = (
    "handlers: with runtime: python each value is module:function importable in the image "
    "(e.g. app.tasks:resize); ./file.js:export needs runtime: node"
)
NODE_ISOLATION_MESSAGE = (
    "isolation: process is for runtime: python (the Node worker runs handlers on its event "
    "loop): remove isolation and maxTasksPerChild, or use a Python worker image"
)

_IS_NODE = "(has(self.runtime) && self.runtime == 'node')"


def rules() -> list[JsonDict]:
    """The CEL rules of TaskQueueSpec that depend on the runtime."""
    pattern = PYTHON_HANDLER_PATTERN  # no backslash or quote: a CEL string as it is
    return [
        cel(
            f"{_IS_NODE} || !has(self.handler) || self.handler.matches('{pattern}')",
            PYTHON_HANDLER_MESSAGE,
            field_path=".handler",
        ),
        cel(
            f"{_IS_NODE} || !has(self.handlers) || "
            f"self.handlers.all(k, self.handlers[k].matches('{pattern}'))",
            PYTHON_HANDLERS_MESSAGE,
            field_path=".handlers",
        ),
        cel(
            f"!{_IS_NODE} || !has(self.isolation) || self.isolation != 'process'",
            NODE_ISOLATION_MESSAGE,
            field_path=".isolation",
        ),
    ]


def runtime_problem(
    runtime: Runtime, handler: str | None, handlers: dict[str, str], isolation: str | None
) -> str | None:
    """What the runtime refuses of a spec (the CEL rules' messages), or None."""
    if runtime == "node":
        return NODE_ISOLATION_MESSAGE if isolation == "process" else None
    if handler is not None and not re.fullmatch(PYTHON_HANDLER_PATTERN, handler):
        return PYTHON_HANDLER_MESSAGE
    if any(not re.fullmatch(PYTHON_HANDLER_PATTERN, ref) for ref in handlers.values()):
        return PYTHON_HANDLERS_MESSAGE
    return None
