import io
import stat

from django.core.management import call_command

from apikit.models import AccessKey
from quotas.models import Node, Quota, ResourceSpec


def test_the_demo_has_quotas_nodes_a_public_pool_and_the_sdk_example_type(demo_cluster):
    assert set(Quota.objects.values_list("name", flat=True)) == {
        "ml-platform", "nlp-team", "cv-team", "llm-pretrain", "llm-finetune"
    }
    assert Quota.objects.get(name="nlp-team").parent.name == "ml-platform"
    assert ResourceSpec.objects.filter(instance_type="ecs.g7.xlarge").exists()
    assert Node.objects.filter(spec__instance_type="ecs.g7.xlarge", quota=None).count() == 4
    assert Node.objects.filter(quota__resource_type="Lingjun").count() == 3


def test_seeding_twice_changes_nothing(demo_cluster, capsys):
    nodes = Node.objects.count()
    call_command("seed_demo")
    assert "already present" in capsys.readouterr().out
    assert Node.objects.count() == nodes


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_seed_prints_an_access_key_to_a_terminal_whose_secret_is_encrypted_at_rest(db):
    out = Terminal()
    call_command("seed_demo", stdout=out)
    secret = next(line.split("=", 1)[1] for line in out.getvalue().splitlines()
                  if line.startswith("ALIBABA_CLOUD_ACCESS_KEY_SECRET="))
    key = AccessKey.objects.get()
    assert secret not in key.secret_encrypted
    assert key.secret == secret


def test_seed_output_that_is_not_a_terminal_never_holds_the_secret_which_goes_to_a_private_file(db, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    out = io.StringIO()  # ./opendlc up > opendlc.log, or a process manager keeping the log
    call_command("seed_demo", stdout=out)
    key = AccessKey.objects.get()
    assert key.secret not in out.getvalue() and key.access_key_id in out.getvalue()
    env = tmp_path / "demo-access-key.env"
    assert f"ALIBABA_CLOUD_ACCESS_KEY_SECRET={key.secret}" in env.read_text().splitlines()
    assert stat.S_IMODE(env.stat().st_mode) == 0o600


def test_the_admin_lists_the_seeded_quotas_and_nodes(client, alice):
    client.force_login(alice)
    quotas = client.get("/admin/quotas/quota/")
    assert quotas.status_code == 200
    assert b"nlp-team" in quotas.content and b"llm-pretrain" in quotas.content
    nodes = client.get("/admin/quotas/node/")
    assert b"pub-g7-0" in nodes.content and b"nlp-team-gn6v-c8g1-1" in nodes.content


def test_the_login_page_answers_and_the_console_needs_a_login(client, db):
    assert client.get("/login/").status_code == 200
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_create_access_key_prints_the_three_variables(alice, capsys):
    call_command("create_access_key", "bob")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("=")[0] for line in lines] == [
        "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "OPENDLC_WORKSPACE_ID"
    ]
    assert lines[2].endswith("=" + str(alice.memberships.get(workspace__name="ml-research").workspace_id))
