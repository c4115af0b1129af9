"""Documents as insurers have them: PDF, DOCX and HTML read into one typed result.

Each format has one reader (`pdf.py`, `docx.py`, `html.py`) that returns a `Document`
(`model.py`): a title, a language, and sections with their heading path, each holding
paragraphs, list items and tables (rows with their header), and, for PDF, the 1-based
pages each block came from. Persian is read in logical order, as letters, with its ZWNJ.
No reader knows about the database, and no part of retrieval knows about file formats:
`retrieval/ingest.py` chunks and stores what a reader returns. `reader.py` is the entry
point: it recognises a file by its content (`sniff.py`), bounds it, and runs its reader in
a worker process (`_worker.py`), so a crash, a hang or a memory blow-up fails that file alone.
"""
