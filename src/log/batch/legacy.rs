//! Legacy message sets (magic 0 and 1), read-only. PLACEHOLDER: being written by a helper.
