"""An MCP client on the official Python SDK (`mcp` from PyPI), run by tests/it/mcp.rs.

It connects to leasehold's tools over Streamable HTTP (`"url"` in the fixture) or by starting
`leasehold mcp` as a stdio subprocess (`"command"`), calls every tool, and asserts what the
contract says each answers. The fixture (JSON in MCP_FIXTURE) names the keys, the runner and
repository target the test set up. The last line of standard output is a JSON report for the Rust side to check against the database.
"""

import asyncio
import json
import os
import sys
import uuid

import httpx2
from mcp import StdioServerParameters
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "list_runners", "pool_summary", "dispatch_job", "get_job", "list_jobs", "job_events",
    "cancel_job", "retry_job", "list_artifacts", "list_repo_targets", "approve_repo_target",
    "revoke_repo_target", "list_secrets", "list_events",
}
FIXTURE = json.loads(os.environ["MCP_FIXTURE"])
called = set()


def connect(key, mode="auto"):
    if "url" in FIXTURE:
        # No kept-alive connection: every request is a new TCP connection, which the balancer
        # may hand to either replica, so one client's requests are served by both.
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"},
            limits=httpx2.Limits(max_keepalive_connections=0),
            timeout=httpx2.Timeout(30.0, read=120.0),
        )
        return Client(streamable_http_client(FIXTURE["url"], http_client=http), mode=mode)
    command = FIXTURE["command"]
    env = dict(os.environ, LEASEHOLD_SERVER=FIXTURE["server"], LEASEHOLD_API_KEY=key)
    env.pop("MCP_FIXTURE", None)
    return Client(StdioServerParameters(command=command[0], args=command[1:], env=env), mode=mode)


def text(result):
    return result.content[0].text


async def call(client, tool, args=None):
    called.add(tool)
    result = await client.call_tool(tool, args or {})
    return result


async def ok(client, tool, args=None):
    result = await call(client, tool, args)
    assert not result.is_error, f"{tool} refused: {text(result)}"
    data = result.structured_content
    assert isinstance(data, dict), f"{tool}: structuredContent {data!r}"
    assert json.loads(text(result)) == data, f"{tool}: the text is the JSON"
    return data


async def refused(client, tool, args, code):
    result = await call(client, tool, args)
    assert result.is_error, f"{tool} should be refused {code}: {result}"
    assert text(result).startswith(code), f"{tool}: {text(result)!r} should begin with {code}"
    return text(result)


async def main():
    report = {}
    admin_key, member_key = FIXTURE["admin_key"], FIXTURE["member_key"]
    runner, target = FIXTURE["runner_id"], FIXTURE["target_id"]

    # The handshake-era protocol (initialize) is served too, at 2025-06-18 or later.
    async with connect(admin_key, mode="legacy") as legacy:
        report["legacy_protocol_version"] = legacy.protocol_version
        assert legacy.protocol_version >= "2025-06-18", legacy.protocol_version
        assert {t.name for t in (await legacy.list_tools()).tools} == TOOLS

    async with connect(admin_key) as admin:
        report["protocol_version"] = admin.protocol_version
        assert admin.protocol_version >= "2025-06-18", admin.protocol_version
        tools = (await admin.list_tools()).tools
        names = [t.name for t in tools]
        assert len(names) == 14 and set(names) == TOOLS, names
        for t in tools:
            assert t.input_schema["type"] == "object", t
        schemas = {t.name: t.input_schema for t in tools}
        assert "target" in schemas["dispatch_job"]["required"]
        assert schemas["approve_repo_target"]["required"] == ["id", "target_id"]

        roster = await ok(admin, "list_runners")
        assert any(r["id"] == runner for r in roster["runners"]), roster
        pool = await ok(admin, "pool_summary")
        assert set(pool) >= {"runners", "slots", "jobs"}, pool

        targets = (await ok(admin, "list_repo_targets"))["targets"]
        mine = [t for t in targets if t["id"] == target]
        assert mine and mine[0]["runner_id"] == runner and mine[0]["status"] == "pending", targets
        approved = await ok(admin, "approve_repo_target", {"id": runner, "target_id": target})
        assert [t["status"] for t in approved["repo_targets"] if t["id"] == target] == ["approved"]

        secrets = await ok(admin, "list_secrets")
        assert [s["name"] for s in secrets["secrets"]] == [FIXTURE["secret_name"]], secrets
        assert FIXTURE["secret_value"] not in json.dumps(secrets)

        dispatch = {
            "target": {"pool": "workspace"},
            "payload": {"argv": ["true"]},
            "idempotency_key": f"mcp-{uuid.uuid4()}",
        }
        job = await ok(admin, "dispatch_job", dispatch)
        assert job["state"] == "parked", job
        again = await ok(admin, "dispatch_job", dispatch)
        assert again["id"] == job["id"], "the idempotency key makes the repeat the first job"
        report["job_id"] = job["id"]

        got = await ok(admin, "get_job", {"id": job["id"], "wait_ms": 0})
        assert got["id"] == job["id"] and got["state"] == "parked"
        listed = await ok(admin, "list_jobs", {"state": "parked", "limit": 10})
        assert job["id"] in [j["id"] for j in listed["jobs"]], listed
        events = await ok(admin, "job_events", {"id": job["id"], "after": 0})
        assert events["events"][0]["data"]["state"] == "parked", events
        feed = await ok(admin, "list_events", {"limit": 1000, "wait_ms": 5000})
        assert job["id"] in [e["job_id"] for e in feed["events"]], feed
        assert isinstance(feed["next"], str), feed

        cancelled = await ok(admin, "cancel_job", {"id": job["id"]})
        assert cancelled["state"] == "cancelled", cancelled

        retried = await ok(admin, "retry_job", {"id": job["id"]})
        assert retried["state"] == "parked" and retried["epoch"] > cancelled["epoch"], retried
        report["retried"] = True
        artifacts = await ok(admin, "list_artifacts", {"id": job["id"]})
        assert artifacts["artifacts"] == [], artifacts

        revoked = await ok(admin, "revoke_repo_target", {"id": runner, "target_id": target})
        assert [t["status"] for t in revoked["repo_targets"] if t["id"] == target] == ["revoked"]

        # Refusals are tool results beginning with the contract's code.
        await refused(admin, "get_job", {"id": "not-a-uuid"}, "bad_request")
        await refused(admin, "get_job", {"id": str(uuid.uuid4())}, "not_found")
        await refused(admin, "get_job", {}, "bad_request")
        await refused(admin, "dispatch_job", {"target": {"pool": "nowhere"}, "payload": 1}, "bad_request")

    async with connect(member_key) as member:
        # An admin's call refused to a member: the role is the member key's.
        report["member_refusal"] = await refused(
            member, "approve_repo_target", {"id": runner, "target_id": target}, "forbidden")
        # Re-running a job naming a secret that is now admin-only: refused, as the route is.
        report["member_retry_refusal"] = await refused(
            member, "retry_job", {"id": FIXTURE["member_job"]}, "forbidden")
        seen = await ok(member, "get_job", {"id": report["job_id"]})
        assert seen["id"] == report["job_id"]

    if "url" in FIXTURE:
        # A bad key gets no session at all: /mcp answers it the API's 401.
        try:
            async with connect("ak_" + "x" * 43) as bad:
                await bad.list_tools()
            report["bad_key"] = "connected"
        except BaseException as e:  # the SDK raises an exception group from its task group
            report["bad_key"] = f"refused: {type(e).__name__}"
        assert report["bad_key"].startswith("refused"), report["bad_key"]
    else:
        # Over stdio the key reaches the API with each call: a bad one is refused there.
        async with connect("ak_" + "x" * 43) as bad:
            report["bad_key"] = await refused(bad, "list_runners", {}, "unauthorized")

    assert called == TOOLS, f"not called: {TOOLS - called}"
    report["called"] = sorted(called)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
