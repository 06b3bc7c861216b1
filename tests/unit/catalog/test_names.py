import pytest

from catalog.errors import InvalidNameError
from catalog.names import check_column_name, parse_table_name


def test_names_are_case_insensitive():
    assert str(parse_table_name("Shop.Orders")) == "shop.orders"


@pytest.mark.parametrize(
    "name",
    [
        "orders",
        "a.b.c",
        "shop.",
        ".orders",
        "shop.ord'ers",
        'shop."x"',
        "shop.x;drop table t",
        "shop.ördrers",
        "shop.x y",
        "1shop.x",
        "shop.x-y",
        "",
        "shop.\x00x",
        "s." + "x" * 200,
    ],
)
def test_hostile_or_malformed_table_names_are_refused(name):
    with pytest.raises(InvalidNameError):
        parse_table_name(name)


@pytest.mark.parametrize("name", ["", "_ls_kind", "a\nb", "x" * 300])
def test_bad_column_names(name):
    with pytest.raises(InvalidNameError):
        check_column_name(name)


def test_column_names_may_be_unicode():
    assert check_column_name("größe") == "größe"
