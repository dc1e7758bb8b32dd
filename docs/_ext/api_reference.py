"""Griffe extensions for the API reference (mkdocs.yml loads them): what the code writes for the type checkers, shown
as a reader needs it.

- ``TypeAliasTypes``: on Python 3.11 a generic alias cannot use the ``type X[T] = ...`` statement, so the package
  writes ``Cites = TypeAliasType("Cites", Annotated[str, Item], type_params=(Item,))``. Griffe reads an attribute
  whose value is that call, and the page showed the raw call; this makes it the type alias it defines, shown by name.
- ``RunOptions``: the loop entry points take their keyword options as ``**options: Unpack[LoopOptions[Args, Answer]]``
  (the options are written once, in ``agentkit._options``). A reader wants the keywords: this puts each option in the
  signature as the keyword-only parameter it is (its type with the entry point's type arguments, ``= None`` since
  an option left out is the same as ``None``) and its description, from the typed dict's field docstring, in place of
  the docstring's ``**options`` entry. Griffe's own ``unpack_typeddict`` handles neither a generic typed dict nor
  one that inherits keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import griffe


class TypeAliasTypes(griffe.Extension):
    """Turn ``X = TypeAliasType("X", value, type_params=(T, ...))`` attributes into ``griffe.TypeAlias`` objects."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for module in _modules(pkg):
            for name, member in list(module.members.items()):
                is_attribute = not member.is_alias and isinstance(member, griffe.Attribute)
                if is_attribute and (alias := _type_alias(member)) is not None:
                    module.set_member(name, alias)


class RunOptions(griffe.Extension):
    """Spell ``**options: Unpack[SomeOptions[...]]`` out as the keyword-only options the typed dict holds."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for module in _modules(pkg):
            for function in _functions(module):
                _spell_out(function)


def _modules(module: griffe.Module) -> Iterator[griffe.Module]:
    yield module
    for member in module.modules.values():
        if not member.is_alias:
            yield from _modules(member)


def _functions(owner: griffe.Module | griffe.Class) -> Iterator[griffe.Function]:
    for member in list(owner.members.values()):
        if member.is_alias:
            continue
        if isinstance(member, griffe.Class):
            yield from _functions(member)
        elif isinstance(member, griffe.Function):
            yield member
            yield from member.overloads or ()


def _type_alias(attribute: griffe.Attribute) -> griffe.TypeAlias | None:
    call = attribute.value
    if not isinstance(call, griffe.ExprCall) or str(call.function).rpartition(".")[2] != "TypeAliasType":
        return None
    positional = [argument for argument in call.arguments if not isinstance(argument, griffe.ExprKeyword)]
    keywords = {arg.name: arg.value for arg in call.arguments if isinstance(arg, griffe.ExprKeyword)}
    params = keywords.get("type_params")
    alias = griffe.TypeAlias(
        attribute.name,
        value=keywords.get("value", positional[1] if len(positional) > 1 else None),
        lineno=attribute.lineno,
        endlineno=attribute.endlineno,
        docstring=attribute.docstring,
        type_parameters=griffe.TypeParameters(
            *(
                griffe.TypeParameter(str(name), kind=griffe.TypeParameterKind.type_var)
                for name in (params.elements if isinstance(params, griffe.ExprTuple) else ())
            )
        ),
        parent=attribute.parent,
    )
    if alias.docstring is not None:
        alias.docstring.parent = alias
    return alias


def _spell_out(function: griffe.Function) -> None:
    kwargs = next((p for p in function.parameters if p.kind is griffe.ParameterKind.var_keyword), None)
    annotation = None if kwargs is None else kwargs.annotation
    if kwargs is None or not isinstance(annotation, griffe.ExprSubscript) or annotation.canonical_name != "Unpack":
        return
    target = annotation.slice
    arguments = target.slice.elements if isinstance(target, griffe.ExprSubscript) else []
    options = function.modules_collection[target.canonical_path]
    assert isinstance(options, griffe.Class), f"{function.path}: {target.canonical_path} is not a typed dict"
    classes = [options, *options.mro()]
    names = next((_generic_names(cls) for cls in reversed(classes) if _generic_names(cls)), [])
    given = dict(zip(names, (str(argument) for argument in arguments), strict=False))
    fields = [
        field
        for cls in reversed(classes)
        for field in cls.members.values()
        if isinstance(field, griffe.Attribute) and field.annotation is not None
    ]
    # The docstring is parsed while `**options` is still a parameter, so its `**options` entry parses cleanly.
    sections = [] if function.docstring is None else function.docstring.parsed
    del function.parameters[kwargs.name]
    documented = []
    for field in fields:
        kind = _substituted(str(field.annotation), given)
        function.parameters[field.name] = griffe.Parameter(
            field.name, annotation=kind, kind=griffe.ParameterKind.keyword_only, default="None"
        )
        description = field.docstring.value if field.docstring is not None else ""
        documented.append(
            griffe.DocstringParameter(name=field.name, annotation=kind, description=description, value="None")
        )
    for section in sections:
        if section.kind is griffe.DocstringSectionKind.parameters:
            entries = [entry for entry in section.value if entry.name.lstrip("*") != kwargs.name]
            section.value[:] = [*entries, *documented]


def _generic_names(cls: griffe.Class) -> list[str]:
    for base in cls.bases:
        if isinstance(base, griffe.ExprSubscript) and base.canonical_name == "Generic":
            return [str(element) for element in getattr(base.slice, "elements", [base.slice])]
    return []


def _substituted(annotation: str, given: dict[str, str]) -> str:
    if not given:
        return annotation
    return re.sub(r"\b(" + "|".join(map(re.escape, given)) + r")\b", lambda match: given[match.group(1)], annotation)
