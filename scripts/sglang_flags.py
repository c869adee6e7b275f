"""Generate `pytest_specperf/sim/sglang_flags.txt`: every command-line flag of SGLang's server.

SGLang cannot be installed on a CPU-only machine without its GPU stack, so this reads the source
of an unpacked SGLang release (a wheel from `pip download --no-deps sglang==VERSION`, unzipped)
with `ast` instead of importing it. It reproduces what `ServerArgs.add_cli_args` registers:

* one action per annotated field `name: A[T, "help"]` or `name: A[T, Arg(...)]` of the
  namespace classes in `srt/arg_groups/fields/*.py` (and of `ServerArgs` itself), named
  `--field-name` or `Arg(cli_name=...)`, plus `Arg(aliases=[...])`; `Arg(no_cli=True)` has none;
  `Arg(action=argparse.BooleanOptionalAction)` adds argparse's `--no-` form of each long name;
* the literal `parser.add_argument("--flag", ...)` calls inside `add_cli_args`;
* argparse's own `-h/--help`.

Usage: python scripts/sglang_flags.py PATH/TO/sglang VERSION > pytest_specperf/sim/sglang_flags.txt
Output: a header, then one line per argparse action: its option strings, space-separated.

This list is the fallback the plugin validates against only where the configured interpreter
cannot import SGLang (a laptop dry run); elsewhere the installed SGLang's own parser decides.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def annotated_actions(tree: ast.Module) -> list[list[str]]:
    """Option strings of every `A[...]`-annotated class field in a module."""
    actions = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            meta = _annotation_meta(stmt.annotation)
            if meta is None:
                continue
            names = _names_of(stmt.target.id, meta)
            if names:
                actions.append(names)
    return actions


def _annotation_meta(annotation: ast.expr) -> ast.expr | None:
    """The metadata of `A[T, meta]` (a help string or an `Arg(...)` call), else None."""
    if not (isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name)):
        return None
    if annotation.value.id not in ("A", "Annotated") or not isinstance(annotation.slice, ast.Tuple):
        return None
    elts = annotation.slice.elts
    if len(elts) < 2:
        return None
    meta = elts[1]
    if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
        return meta
    if isinstance(meta, ast.JoinedStr | ast.BinOp):
        return meta  # a computed help string
    if isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "Arg":
        return meta
    return None


def _names_of(field: str, meta: ast.expr) -> list[str]:
    cli_name = "--" + field.replace("_", "-")
    aliases: list[str] = []
    if isinstance(meta, ast.Call):
        keywords = {k.arg: k.value for k in meta.keywords if k.arg}
        no_cli = keywords.get("no_cli")
        if isinstance(no_cli, ast.Constant) and no_cli.value is True:
            return []
        name = keywords.get("cli_name")
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            cli_name = name.value
        listed = keywords.get("aliases")
        if isinstance(listed, ast.List | ast.Tuple):
            aliases = [e.value for e in listed.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        action = keywords.get("action")
        if isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction":
            names = [cli_name, *aliases]
            return names + ["--no-" + name[2:] for name in names if name.startswith("--")]
    return [cli_name, *aliases]


def manual_actions(tree: ast.Module) -> list[list[str]]:
    """Option strings of the literal `parser.add_argument(...)` calls inside `add_cli_args`."""
    actions = []
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"):
        for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
                names = [
                    a.value for a in call.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
                ]  # fmt: skip
                if names:
                    actions.append(names)
    return actions


def collect(sglang_dir: Path) -> list[list[str]]:
    srt = sglang_dir / "srt"
    sources = [*sorted((srt / "arg_groups" / "fields").glob("*.py")), srt / "server_args.py"]
    actions: list[list[str]] = [["-h", "--help"]]
    for path in sources:
        tree = ast.parse(path.read_text(), filename=str(path))
        actions += annotated_actions(tree)
        if path.name == "server_args.py":
            actions += manual_actions(tree)
    seen: set[str] = set()
    for names in actions:
        duplicate = seen.intersection(names)
        if duplicate:
            raise SystemExit(f"flag registered twice: {sorted(duplicate)}")
        seen.update(names)
    return sorted(actions, key=lambda names: names[0].lstrip("-"))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    sglang_dir, version = Path(argv[0]), argv[1]
    actions = collect(sglang_dir)
    print(f"# SGLang {version} server flags: one argparse action per line, option strings space-separated.")
    print(f"# Generated by scripts/sglang_flags.py from the sglang=={version} wheel's source; {len(actions)} actions.")
    for names in actions:
        print(" ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
