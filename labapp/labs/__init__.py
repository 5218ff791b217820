"""The six labs: their catalog (jobs, checks, key numbers), run and hand-in, their pages and the team demo."""
