"""What failures teach operators: captured samples, unmatched signatures, follow-ups.

Nothing here changes an answer; it records what happened to it so `mendpoint gaps`,
`/followups` and the rule-drafting tools can say which rule to write next.
"""
