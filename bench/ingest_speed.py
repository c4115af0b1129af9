"""How fast `chatbot ingest` loads a library, and what it costs in memory.

    .venv/bin/python -m bench.ingest_speed [--pages 1000] [--files 300]

Prints:
- the worker process's cost: its start, and the round trip per file once it runs (a tiny
  reader, in the worker and in this process), so the price of reading every file in a
  bounded child process is a figure, not a guess;
- a PDF of `--pages` pages (built here with fpdf2, a heading and three paragraphs a page):
  read alone (`DocumentReader.read`) and ingested whole (read, cut, written to Postgres), in
  pages per second, with the peak RSS of this process and of the reader's worker.

Uses CHATBOT_DATABASE_URL (a migrated database; the bench's tenant is deleted afterwards)
or starts an embedded Postgres under a temp dir. Needs fpdf2 for the PDF part (skipped
without it) and the PDF reader (`chatbot.documents.pdf`).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from tests.fixtures.document_readers import DESCRIBED, read_described, write_described

from chatbot.documents.model import Document, Paragraph, ReadLimits, Section
from chatbot.documents.reader import READERS, DocumentReader
from chatbot.ids import TenantId
from chatbot.retrieval.ingest import ingest_paths

TENANT = TenantId("bench-ingest")
WORDS = (
    "The insurer pays the reasonable cost of repairing or replacing the damaged glass of the insured car, "
    "after the deductible shown in the schedule, provided the claim is filed within thirty days."
)


def worker_overhead(folder: Path, files: int) -> None:
    """Read tiny files with a reader that costs almost nothing: what is left is the worker's round trip."""
    paths = []
    for n in range(files):
        tiny = Document("Tiny", "en", (Section(("Tiny",), (Paragraph(f"Page {n}. {WORDS}"),)),))
        paths.append(write_described(folder / f"tiny-{n}.html", tiny, magic=b"<!DOCTYPE html>\n"))
    with DocumentReader(readers={"html": DESCRIBED}) as reader:
        found = [reader.recognise(p) for p in paths]
        start = time.perf_counter()
        reader.read(found[0])
        first = time.perf_counter() - start
        start = time.perf_counter()
        for item in found[1:]:
            reader.read(item)
        in_worker = (time.perf_counter() - start) / (len(found) - 1)
    start = time.perf_counter()
    for path in paths[1:]:
        read_described(path, ReadLimits())
    in_process = (time.perf_counter() - start) / (len(paths) - 1)
    print(f"worker start + first file: {first * 1000:.1f} ms")
    print(
        f"per file, {files - 1} files: {in_worker * 1000:.3f} ms in the worker, {in_process * 1000:.3f} ms in process"
        f" -> overhead {(in_worker - in_process) * 1000:.3f} ms/file"
    )


def build_pdf(path: Path, pages: int) -> bool:
    try:
        from fpdf import FPDF
    except ImportError:
        print("fpdf2 is not installed: the PDF part is skipped")
        return False
    pdf = FPDF()
    pdf.set_auto_page_break(False)
    for page in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 16)
        pdf.cell(0, 10, f"Section {page}: glass cover", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", "", 11)
        for paragraph in range(3):
            pdf.multi_cell(0, 6, f"Clause {page}.{paragraph + 1}. {WORDS}", new_x="LMARGIN", new_y="NEXT")
            pdf.ln(3)
    pdf.output(str(path))
    return True


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def _worker_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def built_pdf(folder: Path, pages: int) -> Path | None:
    """Return a `pages`-page PDF under folder/kb, built in a process of its own (this one's peak is the ingest's)."""
    path = folder / "kb" / "wording.pdf"
    path.parent.mkdir()
    start = time.perf_counter()
    built = subprocess.run([sys.executable, "-m", "bench.ingest_speed", "--build", str(path), "--pages", str(pages)])
    if built.returncode != 0 or not path.exists():
        return None
    print(f"built a {pages}-page PDF ({path.stat().st_size / 1024**2:.1f} MB) in {time.perf_counter() - start:.1f} s")
    return path


async def pdf_speed(path: Path, pages: int, pdf_reader: str) -> None:
    limits = ReadLimits(max_pages=max(pages, ReadLimits().max_pages), seconds=600)
    readers = {**READERS, "pdf": pdf_reader}
    with DocumentReader(limits, readers=readers) as reader:
        found = reader.recognise(path)
        start = time.perf_counter()
        document = reader.read(found)
        read_seconds = time.perf_counter() - start
        worker = reader._worker
        worker_peak = _worker_peak_mb(worker.process.pid) if worker is not None else 0.0
    blocks = sum(len(s.blocks) for s in document.sections)
    print(
        f"read alone: {read_seconds:.1f} s, {pages / read_seconds:.1f} pages/s ({blocks} blocks), "
        f"reader worker's peak RSS {worker_peak:.0f} MB"
    )

    from bench._pg import bench_database

    async with bench_database("bench_ingest") as url:
        kwargs = {"autocommit": True, "row_factory": dict_row}
        async with AsyncConnectionPool(url, min_size=1, max_size=2, kwargs=kwargs, open=False) as pool:
            await _forget(pool)
            try:
                with DocumentReader(limits, readers=readers) as reader:
                    start = time.perf_counter()
                    report = await ingest_paths(pool, TENANT, [path.parent], reader=reader)
                    seconds = time.perf_counter() - start
                print(
                    f"ingested: {seconds:.1f} s, {report.pages / seconds:.1f} pages/s "
                    f"({report.chunks_written} chunks, skipped={len(report.skipped)})"
                )
            finally:
                await _forget(pool)
    print(f"peak RSS of the ingesting process (reader worker aside): {_peak_mb():.0f} MB")


async def _forget(pool: AsyncConnectionPool[Any]) -> None:
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM kb_chunks WHERE tenant_id = %s", (TENANT,))
        await conn.execute("DELETE FROM kb_terms WHERE tenant_id = %s", (TENANT,))
        await conn.execute("DELETE FROM kb_documents WHERE tenant_id = %s", (TENANT,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--reader", default=READERS["pdf"], help="The PDF reader as module:function.")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the PDF-building child
    args = parser.parse_args()
    if args.build is not None:
        sys.exit(0 if build_pdf(args.build, args.pages) else 1)
    print(f"python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="chatbot-bench-ingest-") as tmp:
        worker_overhead(Path(tmp), args.files)
        path = built_pdf(Path(tmp), args.pages)
        if path is not None:
            asyncio.run(pdf_speed(path, args.pages, args.reader))


if __name__ == "__main__":
    main()
