"""Decisions beyond yes and no: an approval that amends the call it approves.

``approve(proposal, approved_by=..., args=...)`` approves the call with the args an approver
changed; the ``Approval`` then carries an ``Amendment``: the call as it was proposed, who changed
it and which fields. The amended call has its own digest and runs exactly once, wherever an
approved call runs; the original never runs.
"""

from agentkit._approval import Amendment

__all__ = ["Amendment"]
