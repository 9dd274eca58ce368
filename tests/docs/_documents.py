"""The code blocks of README.md, docs/*.md and integrations/langchain/README.md, read with
Sybil's markdown parsers.

The markdown lives outside the test paths, so pytest never collects it itself: this module
reads it once, and the tests are parametrized over what it finds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sybil import Document, Example, Sybil
from sybil.evaluators.skip import Skipper
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

__all__ = ["ROOT", "Block", "JsonBlock", "json_blocks", "python_blocks"]

ROOT = Path(__file__).resolve().parents[2]
LANGCHAIN_README = ROOT / "integrations" / "langchain" / "README.md"
_PATHS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), LANGCHAIN_README]


def _name(path: Path) -> str:
    """A page's name in test ids: its file name, or its path beside the other READMEs."""
    return path.relative_to(ROOT).as_posix() if path == LANGCHAIN_README else path.name


_PYTHON = Sybil([PythonCodeBlockParser(), SkipParser()])
_JSON = Sybil([CodeBlockParser(language="json")])


@dataclass(frozen=True)
class Block:
    """A Python block, with the skip directives written just before it."""

    document: Document
    example: Example
    directives: tuple[Example, ...]

    @property
    def document_name(self) -> str:
        return _name(Path(self.document.path))

    @property
    def id(self) -> str:
        return f"{self.document_name}:{self.example.line}"

    @property
    def source(self) -> str:
        return str(self.example.parsed)

    def run(self) -> None:
        """Run in the document's namespace, after the blocks before it (pytest runs them in
        order); a skip directive raises unittest.SkipTest, which pytest reports as a skip."""
        for directive in self.directives:
            directive.evaluate()
        self.example.evaluate()


@dataclass(frozen=True)
class JsonBlock:
    document_name: str
    line: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.document_name}:{self.line}"


def python_blocks() -> list[Block]:
    blocks: list[Block] = []
    for path in _PATHS:
        document = _PYTHON.parse(path)
        pending: list[Example] = []
        for example in document.examples():
            if isinstance(example.region.evaluator, Skipper):
                pending.append(example)
                continue
            blocks.append(Block(document, example, tuple(pending)))
            pending = []
    return blocks


def json_blocks() -> list[JsonBlock]:
    return [
        JsonBlock(_name(path), example.line, str(example.parsed))
        for path in _PATHS
        for example in _JSON.parse(path).examples()
    ]
