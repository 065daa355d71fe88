"""Playing an environment by hand, as the tests of environments do: the policy's messages are given."""

from __future__ import annotations

from trainer_core.environments import Episode, Reply


def played(environment, row: dict, *messages: str) -> list[Reply]:
    """The replies of `environment` to the policy's `messages`, in one episode of `row`."""
    episode = Episode(row=row)
    environment.reset(episode)
    replies = []
    for message in messages:
        episode.messages.append(("policy", message))
        replies.append(environment.step(episode, message))
        if not replies[-1].done:
            episode.messages.append(("environment", replies[-1].text))
    return replies
