"""The scripts' `use_tf_keras_only`: a process that calls it before importing TensorFlow never
loads Keras 3 (nor the scikit-learn and matplotlib it brings, 1.5-2 s of each command's start) and
its `tf.keras` is tf_keras, the Keras every model here is built with; the user's choice wins, and
once TensorFlow is imported the environment is left as it was."""

import json
import os
import subprocess
import sys
from pathlib import Path

import tensorflow  # noqa: F401 (imported, as in every test process: the second test's premise)

from electra_tf.cli import use_tf_keras_only

REPO = Path(__file__).resolve().parents[1]
VARIABLE = "TF_USE_LEGACY_KERAS"
CHECK = """
import json, sys
from electra_tf.cli import use_tf_keras_only
use_tf_keras_only()
import tensorflow as tf
import tensorflow_text
import tf_keras
print(json.dumps({"keras_3": [name for name in ("keras", "sklearn", "matplotlib") if name in sys.modules],
                  "tf_keras": tf.keras.layers.Dense is tf_keras.layers.Dense}))
"""


def test_a_fresh_process_imports_tensorflow_without_keras_3():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop(VARIABLE, None)
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == {"keras_3": [], "tf_keras": True}


def test_the_users_choice_wins_and_an_imported_tensorflow_is_left_alone(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    use_tf_keras_only()
    assert VARIABLE not in os.environ  # too late to matter: a later child process inherits nothing
    monkeypatch.delitem(sys.modules, "tensorflow")  # as before TensorFlow's import
    monkeypatch.setenv(VARIABLE, "0")
    use_tf_keras_only()
    assert os.environ[VARIABLE] == "0"
    monkeypatch.delenv(VARIABLE)
    use_tf_keras_only()
    assert os.environ[VARIABLE] == "1"
