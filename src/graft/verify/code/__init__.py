"""The code verifier: a problem's tests in one normalized form and the program a response
proposes (`verifier.py`), the fenced block chosen as that program (`blocks.py`); every program
runs in `graft.sandbox`."""
