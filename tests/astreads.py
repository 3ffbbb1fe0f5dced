"""How source code reaches an object's attributes, read from its syntax tree: shared by
the checks that keep the code off other packages' private attributes
(tests/codebase/test_private_attributes.py, tests/protocol/test_redis_privates.py)."""

from __future__ import annotations

import ast

#: Built-ins that reach an attribute by a name given as a string.
ATTR_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr", "delattr"})


def attribute_reached(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(the object, the attribute's name) when ``node`` reaches an attribute: ``x.name``
    (read, written or deleted) or ``getattr(x, "name")`` and its kin with a literal name;
    else None."""
    if isinstance(node, ast.Attribute):
        return node.value, node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ATTR_FUNCTIONS
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return node.args[0], node.args[1].value
    return None
