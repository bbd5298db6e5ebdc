-- Faithful sequences (docs/decisions/0041-sequence-surfaces-and-record-through.md): answers 2..n of a
-- sequence keep what the provider sent besides the body (allowlisted headers, stream gaps) as answer 1
-- keeps it in entries.meta, so each answer replays its own, and a reorder moves it with its answer.
ALTER TABLE entry_answers ADD COLUMN meta TEXT;
