# reverse_data.py - the training data of the trainer's command-line tests
# (tests/train_*.sh): "reverse 4071" -> "1704", digits drawn from a seeded
# generator, so that every test that asks for n records gets the same ones.
import random


def records(n, seed=1):
    """n {"query", "response"} records: a string of 3 to 8 digits and its reverse"""
    rng = random.Random(seed)
    recs = []
    for _ in range(n):
        s = ''.join(rng.choice('0123456789') for _ in range(rng.randint(3, 8)))
        recs.append({"query": "reverse " + s, "response": s[::-1]})
    return recs
