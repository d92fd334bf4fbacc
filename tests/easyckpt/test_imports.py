import json

from .conftest import run_python

LIST_MODULES = (
    "import sys, json, easyckpt; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
)


def test_importing_easyckpt_does_not_pay_for_importing_torch():
    result = run_python(LIST_MODULES)
    assert "torch" not in json.loads(result.stdout)


def test_a_plain_python_checkpoint_loads_without_importing_torch(tmp_path):
    code = (
        "import sys, easyckpt\n"
        "ck = easyckpt.Checkpointer(sys.argv[1]); ck.save(1, {'a': 1}); ck.wait()\n"
        "assert ck.load_latest() == (1, {'a': 1})\n"
        "print('torch' in sys.modules)"
    )
    result = run_python(code, str(tmp_path))
    assert result.stdout.strip() == "False", result.stderr
