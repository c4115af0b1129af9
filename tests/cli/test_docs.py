"""The docs a newcomer follows from a fresh clone: every link resolves inside the repository,
nothing points outside it, and the README reaches every doc."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked(pattern: str) -> list[Path]:
    names = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in names.stdout.split()]


def test_every_relative_link_of_every_doc_resolves() -> None:
    broken = []
    for doc in tracked("*.md"):
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.exists() or ROOT not in path.parents:
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == []


def test_nothing_refers_to_files_outside_the_repository() -> None:
    needle = "../" + "shared"  # the folder beside the repository that a clone does not have
    outside = [
        str(path.relative_to(ROOT))
        for path in tracked("*")
        if path.suffix in (".md", ".py", ".toml", ".yaml", ".sql", ".cfg") and needle in path.read_text("utf-8")
    ]
    assert outside == []


def test_the_readme_links_every_doc() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {(ROOT / target.split("#")[0]).resolve() for target in LINK.findall(readme)}
    docs = [*tracked("docs/*.md"), *tracked("docs/**/*.md"), ROOT / "deploy" / "k8s" / "README.md"]
    assert [str(d.relative_to(ROOT)) for d in docs if d.resolve() not in linked] == []
