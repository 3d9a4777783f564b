"""The checks a peer script runs: each registered with @check("what it shows") in the order
the script defines them, each failing by raising (expect) with what was expected and what came
back."""

CHECKS = []


def check(name):
    """Registers a check: a function run in order, reported by its name."""

    def register(function):
        CHECKS.append((name, function))
        return function

    return register


def expect(condition, what):
    if not condition:
        raise AssertionError(what)
