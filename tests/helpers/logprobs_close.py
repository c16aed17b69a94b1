"""logprobs_close: two answers' per-token log-probabilities, equal within a
tolerance (common.sh rf_width_tol): the same tokens, values within tol, and
top lists whose values agree rank by rank while their tokens may swap
places in near ties (each token of b is in a's list at a value within tol,
or within tol of a's last: a near tie with the first one left out).
Entries as the CLI and the server's completions print them: token (an id
or text), logprob, top_logprobs [{token, logprob}]."""


def same_entry(a, b, tol):
    if a["token"] != b["token"] or abs(a["logprob"] - b["logprob"]) > tol:
        return False
    ta, tb = a.get("top_logprobs") or [], b.get("top_logprobs") or []
    if len(ta) != len(tb):
        return False
    for k, t in enumerate(tb):
        if abs(ta[k]["logprob"] - t["logprob"]) > tol:
            return False
        if not any(u["token"] == t["token"] and abs(u["logprob"] - t["logprob"]) <= tol for u in ta) and \
                abs(ta[-1]["logprob"] - t["logprob"]) > tol:
            return False
    return True


def differences(a, b, tol):
    """positions where the entries of a and b differ (a length mismatch: -1)"""
    if len(a) != len(b):
        return [-1]
    return [i for i, (x, y) in enumerate(zip(a, b)) if not same_entry(x, y, tol)]


if __name__ == "__main__":
    import json
    import sys
    a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    bad = differences(a, b, float(sys.argv[3]))
    if bad:
        print("logprobs differ at positions %s" % bad, file=sys.stderr)
    sys.exit(1 if bad else 0)
