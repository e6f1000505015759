"""Pure analysis over numbers: statistics, tolerances, comparability. No I/O, no torch."""
