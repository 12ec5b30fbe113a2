-- An operator's end is final (issue 33): when an operator ended or archived the item's
-- sale. An edit of `ends_at` is refused from then on; a sale that ended by reaching its
-- own `ends_at` (this stays NULL) may still be extended by an edit.
ALTER TABLE items ADD COLUMN ended_by_operator_at TIMESTAMPTZ;
