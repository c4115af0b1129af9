-- Tenant knowledge base: documents, their chunks, and each tenant's search vocabulary.
-- Every table and index leads with tenant_id: no query plan reaches another tenant's rows
-- except through a tenant_id filter, and each tenant's search touches only its own slice.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE IF NOT EXISTS kb_documents (
    tenant_id    text        NOT NULL,
    document_id  text        NOT NULL,
    title        text        NOT NULL,
    source       text        NOT NULL,  -- name of the ingested folder ('' for single files)
    content_sha  text        NOT NULL,  -- sha256 of the file's text: unchanged files are skipped
    language     text        NOT NULL CHECK (language IN ('fa', 'en')),
    chunk_count  integer     NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, document_id)
);

CREATE INDEX IF NOT EXISTS kb_documents_source ON kb_documents (tenant_id, source);

CREATE TABLE IF NOT EXISTS kb_chunks (
    tenant_id    text     NOT NULL,
    chunk_id     text     NOT NULL,  -- content-derived: re-ingesting unchanged text keeps it
    document_id  text     NOT NULL,
    ordinal      integer  NOT NULL,
    title        text     NOT NULL,
    text         text     NOT NULL,
    language     text     NOT NULL CHECK (language IN ('fa', 'en')),
    search_text  text     NOT NULL,  -- normalised title + text (see retrieval/normalize.py)
    tsv          tsvector NOT NULL,  -- english config for English chunks, simple for Persian
    embedding    vector   NULL,      -- dimension-free: the embedding model is a deployment choice
    metadata     jsonb    NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (tenant_id, chunk_id),
    FOREIGN KEY (tenant_id, document_id) REFERENCES kb_documents (tenant_id, document_id) ON DELETE CASCADE
);

CREATE INDEX IF NOT EXISTS kb_chunks_document ON kb_chunks (tenant_id, document_id, ordinal);
-- btree_gin lets one GIN scan answer "this tenant AND these lexemes".
CREATE INDEX IF NOT EXISTS kb_chunks_tsv ON kb_chunks USING gin (tenant_id, tsv);

-- Lexemes of each tenant's chunks with their chunk frequency (rebuilt after every ingest):
-- gives search an inverse document frequency, and typo tolerance by trigram matching a
-- misspelt query word against the words the tenant's documents actually contain.
CREATE TABLE IF NOT EXISTS kb_terms (
    tenant_id  text    NOT NULL,
    term       text    NOT NULL,
    ndoc       integer NOT NULL,
    PRIMARY KEY (tenant_id, term)
);

CREATE INDEX IF NOT EXISTS kb_terms_trgm ON kb_terms USING gin (tenant_id, term gin_trgm_ops);
