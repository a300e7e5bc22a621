"""The math grader: the final answer a response commits to (`answer.py`, `commitment.py` and its
vocabulary), its value and the gold's (`values.py`), the forms a problem asks for (`forms.py`,
`problem_text.py`), choice letters and lists (`choices.py`) and unevaluated rewrites
(`unevaluated.py`)."""
