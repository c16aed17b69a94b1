# pycheck.py - checks for the Python that the shell tests run: check()
# prints a FAIL line for a false condition and counts it; finish() prints
# the count and exits 1 when any failed. The tests put tests/helpers on
# PYTHONPATH (RF_HELPERS, common.sh).
import sys

prefix = ""  # what follows "FAIL: " in each line, e.g. "Llama: "
failed = 0


def check(cond, what):
    global failed
    if not cond:
        failed += 1
        print("FAIL: " + prefix + str(what), file=sys.stderr)


def finish(name):
    print("%s: %d failed" % (name, failed))
    sys.exit(1 if failed else 0)
