-- Thread recall: the searchable turns of each thread (user and assistant messages), so a
-- late question finds the turns it needs after they left the model window (recall/).
--
-- Nothing here that the transcript does not hold: each row is one transcript message (its
-- id, place, role, time and text) plus what search derives from that text (its terms with
-- their positions, its length in terms, and an embedding when CHATBOT_EMBEDDINGS is set).
-- Rows are written by the next run of the thread, from messages its checkpoints already
-- hold (a failed or cancelled run adds no row of its own), or derived from the transcript
-- on first need for a thread older than this table. They go with the thread: deletion,
-- retention and erasure delete every table with a `thread_id` column (threads/deletion.py).
--
-- Placement (docs/scaling.md): distributed by thread_id, co-located with the checkpoints.
-- Every statement names one thread_id: the recall read is single-shard.
create table if not exists thread_turns (
    thread_id   text        not null,
    position    integer     not null,  -- the message's place among the thread's user and assistant messages, from 0
    message_id  text        not null,
    role        text        not null check (role in ('user', 'assistant')),
    created_at  timestamptz,
    content     text        not null,
    terms       tsvector    not null,  -- normalised terms (recall/terms.py), built by the service, 'simple' form
    length      integer     not null,  -- terms in the message, for BM25's length normalisation
    novel       integer     not null,  -- terms the thread had not used before this message (new information)
    embedding   vector      null,      -- dimension-free, as kb_chunks: the embedding model is a deployment choice
    primary key (thread_id, position)
);

create unique index if not exists thread_turns_message on thread_turns (thread_id, message_id);
-- btree_gin (0002): one GIN scan answers "this thread AND any of these terms".
create index if not exists thread_turns_terms on thread_turns using gin (thread_id, terms);

-- How many of a thread's turns hold each term (BM25's document frequency), kept as turns are
-- indexed: the search reads the frequencies of its few query terms by key, and matches only
-- the turns holding its more telling terms, so a search at 5,000 turns reads what those
-- terms touch rather than every turn. Terms only (no text); distributed by thread_id too.
create table if not exists thread_terms (
    thread_id  text    not null,
    term       text    not null,
    turns      integer not null,
    primary key (thread_id, term)
);
