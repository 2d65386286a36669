"""Hugging Face Hub pushes for SLICE models: :func:`check_hub_access` checks, before anything is trained, that the
trainer's own push (``push_to_hub=True, hub_model_id=...``) can succeed."""

from __future__ import annotations

from typing import Any

from slice_st._extras import needs_extra
from slice_st.errors import HubAccessError
from slice_st.loading import hub_offline


def check_hub_access(repo_id: str, *, api=None) -> dict[str, Any]:
    """Check that ``repo_id`` can be pushed to, or raise :class:`HubAccessError` saying why not; returns ``whoami``.

    The Hub must be on (``HF_HUB_OFFLINE`` unset), a token set, valid and not read-only, and the repository in the
    user's or one of their organisations' namespace. ``api`` defaults to ``huggingface_hub.HfApi()``.
    """
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise HubAccessError(
            f"--push-to-hub needs a repository id: --hub-model-id ORG/NAME, got {repo_id!r}."
        )
    if hub_offline():
        raise HubAccessError(
            f"cannot push to {repo_id}: the Hub is switched off (HF_HUB_OFFLINE=1); unset it."
        )
    with needs_extra("train", "pushing to the Hub"):
        import huggingface_hub
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    api = api if api is not None else huggingface_hub.HfApi()
    if not huggingface_hub.get_token():
        raise HubAccessError(
            f"cannot push to {repo_id}: no Hugging Face token; run `hf auth login` or set HF_TOKEN."
        )
    try:
        me = api.whoami()
    except (HfHubHTTPError, OSError, ConnectionError) as error:
        why = "refused the token" if isinstance(error, HfHubHTTPError) else "cannot be reached"
        why += f" ({' '.join(str(error).split())[:160]})"
        raise HubAccessError(f"cannot push to {repo_id}: the Hub {why}.") from None
    if ((me.get("auth") or {}).get("accessToken") or {}).get("role") == "read":
        raise HubAccessError(
            f"cannot push to {repo_id}: the token is read-only; create one with write access."
        )
    namespace = repo_id.split("/")[0]
    mine = {me.get("name")} | {org.get("name") for org in me.get("orgs") or []}
    if namespace not in mine:
        raise HubAccessError(
            f"cannot push to {repo_id}: the token's user {me.get('name')!r} is not {namespace!r} nor one of its "
            f"organisations."
        )
    try:
        api.repo_info(repo_id, repo_type="model")
    except RepositoryNotFoundError:
        pass  # the trainer creates it (private with hub_private_repo)
    except HfHubHTTPError as error:
        raise HubAccessError(
            f"cannot push to {repo_id}: {' '.join(str(error).split())[:160]}."
        ) from None
    return me
