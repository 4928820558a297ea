"""docs/operations.md as data: the commands of its shell blocks, by section, and the placeholders a reader replaces."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


DOC = ROOT / "docs" / "operations.md"


# Values a placeholder stands for when a command is rendered.
PLACEHOLDERS = {"<registry>": "registry.example", "<tag>": "1.0.0"}
# Where docs/getting-started.md installs the published charts from (hack/release.sh pushes them there)
PUBLISHED_CHARTS = "oci://ghcr.io/slinky-metacontroller/charts/"


def local_charts(words: list[str]) -> list[str]:
    """A page command with each published chart read from charts/ instead, the directory `make release`
    packages it from: the tests have no way to that registry (tests/test_release.py installs a chart from
    a registry of its own, pushed by `make release`)."""
    return [f"charts/{w.removeprefix(PUBLISHED_CHARTS)}" if w.startswith(PUBLISHED_CHARTS) else w for w in words]


@dataclass(frozen=True)
class Command:
    line: str
    words: list[str]

    def option(self, name: str) -> str | None:
        return next((self.words[i + 1] for i, w in enumerate(self.words[:-1]) if w == name), None)


def commands(text: str | None = None) -> list[Command]:
    """The commands of the page's ```sh blocks (of ``text``, a part of it, when given), in order."""
    blocks = re.findall(r"^ *```sh\n(.*?)^ *```", DOC.read_text() if text is None else text, flags=re.S | re.M)
    lines = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    return [Command(line, shlex.split(line)) for line in lines]


def sections(page: Path = DOC) -> dict[str, list[Command]]:
    """The commands of each `## ` section of ``page`` (docs/operations.md by default), by its title."""
    parts = re.split(r"^## (.+)$", page.read_text(), flags=re.M)
    return {title.strip(): commands(body) for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def step(page: Path, number: str) -> list[Command]:
    """The commands of a numbered section (`## 3. ...`) of a page that reads as steps (docs/getting-started.md)."""
    (found,) = [c for title, c in sections(page).items() if title.startswith(f"{number}.")]
    return found


def yaml_block(page: Path, number: str) -> str:
    """The one ```yaml block of a numbered section."""
    body = page.read_text().split(f"## {number}.")[1].split("\n## ")[0]
    (block,) = re.findall(r"^```yaml\n(.*?)^```", body, flags=re.S | re.M)
    return str(block)
