"""The review: the meeting's five steps over the engine (review.py), its candidate fixes (candidates.py),
validation matrix (matrix.py), first failing slice (first_slice.py) and root-cause packet (packet.py)."""
