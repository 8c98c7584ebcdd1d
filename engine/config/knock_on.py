"""Knock-on issues: what check() says about a config that was not read as the user wrote it.

When a launcher cannot be read, the imported config is empty, and check() rightly finds a
dozen flags unset; when a `--set` value is refused, the flag is left unset, and every rule
that needs it says so. Those issues are true of the config but not of what the user wrote, and
they bury the one that is. Here they are grouped under the refusal as one info line that names
them (nothing is dropped silently): the user fixes the refusal, and the rest come back judged
on what they meant.

This is a presentation step over check()'s result, not a rule: check() itself stays whole, so
a caller that wants every issue (the JSON output, a test) still has them.
"""

from __future__ import annotations

from .issues import Issue

KNOCK_ON = "input.knock_on"
# issues that refuse what the user wrote: the flag they name is left unset in the config
REFUSING_CODES = frozenset({"value.bad_type", "value.empty_path"})


def group_knock_on(read_issues: list[Issue], checked: list[Issue], *,
                   unreadable: str | None = None) -> list[Issue]:
    """`read_issues` (from reading the input) then check()'s `checked`, with knock-on issues
    grouped. `unreadable`: why the input as a whole could not be read (a launcher the reader
    refused); then everything check() says is about an empty config, a knock-on."""
    return [issue for issue, _ in knock_on_tree(read_issues, checked, unreadable=unreadable)]


def knock_on_tree(read_issues: list[Issue], checked: list[Issue], *,
                  unreadable: str | None = None) -> list[tuple[Issue, tuple[Issue, ...]]]:
    """group_knock_on's issues, each with the issues grouped under it: the knock-on summary
    holds them (a front end can unfold it), every other issue holds none."""
    if unreadable:
        return [*((i, ()) for i in read_issues), *_summary(checked, unreadable)]
    issues = [*read_issues, *checked]
    refused = {flag for i in issues if i.code in REFUSING_CODES for flag in i.flags}
    grouped = [i for i in issues if i.code not in REFUSING_CODES and i.level != "info"
               and refused & set(i.flags)]
    if not grouped:
        return [(i, ()) for i in issues]
    because = f"the refused value of {', '.join(sorted(refused))}"
    return [(i, ()) for i in issues if i not in grouped] + _summary(grouped, because)


def _summary(grouped: list[Issue], because: str) -> list[tuple[Issue, tuple[Issue, ...]]]:
    if not grouped:
        return []
    codes = ", ".join(dict.fromkeys(i.code for i in grouped))
    flags = tuple(dict.fromkeys(f for i in grouped for f in i.flags))[:6]
    summary = Issue("info", KNOCK_ON, flags,
                    f"{len(grouped)} more issue{'s' if len(grouped) != 1 else ''} follow from "
                    f"{because} ({codes}); they are judged again once it is fixed.",
                    "fix the error above first")
    return [(summary, tuple(grouped))]
