"""The reader's ``storage.*`` options: parsed into StorageOptions, shipped whole, shown masked."""

from __future__ import annotations

import pickle

import pytest

from ingest.spark_read.errors import ReadOptionError
from ingest.spark_read.options import parse_options

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
BASE = {"path": "shop.orders", "catalog": "postgresql://u@db/lake"}


def test_storage_options_in_any_case_become_storage_options():
    options = parse_options(
        {
            **BASE,
            "storage.endpoint": "http://minio:9000",
            "storage.pathstyle": "false",  # Spark hands keys over lower-cased
            "STORAGE.SECRETKEY": SECRET,
        }
    )
    assert options.storage.endpoint == "http://minio:9000" and options.storage.path_style is False
    shipped = pickle.loads(pickle.dumps(options.storage))
    assert shipped.secret_key is not None and shipped.secret_key.get_secret_value() == SECRET
    assert SECRET not in repr(options) and SECRET not in repr(options.storage)


def test_no_storage_options_mean_the_default_chain():
    storage = parse_options(BASE).storage
    assert storage.access_key is None and storage.endpoint is None


def test_a_bad_storage_option_names_itself_without_its_value():
    with pytest.raises(ReadOptionError) as caught:
        parse_options({**BASE, "storage.pathStyle": "sometimes", "storage.secretKey": SECRET})
    assert "storage.pathStyle" in str(caught.value) and SECRET not in str(caught.value)
