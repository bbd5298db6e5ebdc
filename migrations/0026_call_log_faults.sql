-- A call-log row of a faulted call names its fault: the rule, or the X-Semula-Fault header's kind and
-- parameters (docs/decisions/0061-fault-rules.md). Apart from 0024 so that a test of 0021, which builds
-- the SQLite call log anew, can hold it back with it.
ALTER TABLE call_log ADD COLUMN fault TEXT;
