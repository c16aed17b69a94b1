"""chat_questions.py - the chat questions the server benchmarks send
(bench_batch.sh with CHAT=1, modes_ab.py): the demo model's task families,
the numbers varied per client and request so that no two requests of a run
share a prompt."""

QUESTIONS = ["Tom has {a} apples. He buys {b} more and gives {c} away. How many apples does he have?",
             "Write a Python function f(x) that does this: start from x, add {a}, multiply by {b}, then return it.",
             "Make a JSON record for a person named Ada, age {a}, city London.",
             "A shop sells {a} boxes of {b} pens each and then {c} more pens. How many pens were sold?"]


def question(client, i):
    """client's i-th question"""
    return QUESTIONS[(client + i) % len(QUESTIONS)].format(a=client * 7 + i + 3, b=client + 2 * i + 4, c=i + 2)
