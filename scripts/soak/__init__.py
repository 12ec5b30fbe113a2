"""`make soak`: the fault schedule (schedule.py) and the judgement (claims.py,
summary.py) of a soak, typed; run as `python3 scripts/soak` (__main__.py)."""
