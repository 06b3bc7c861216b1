"""The demo's source database: a small shop (customers, orders, payments) and a workload of
inserts, updates, deletes and multi-table transactions running in a thread.

The workload counts the Debezium events its changes must produce (one per inserted or updated
row, two per deleted row: the delete and its tombstone), so the demo can say how many events are
not yet in the lake, and when the lake has caught up.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

TABLES = ("customers", "orders", "payments")
KEYS = {"customers": "id", "orders": "id", "payments": "id"}
SCHEMA = (
    """CREATE TABLE customers (
        id integer PRIMARY KEY, name text NOT NULL, email text NOT NULL, tier text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now())""",
    """CREATE TABLE orders (
        id integer PRIMARY KEY, customer_id integer NOT NULL, status text NOT NULL,
        amount numeric(10, 2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now())""",
    """CREATE TABLE payments (
        id integer PRIMARY KEY, order_id integer NOT NULL, method text NOT NULL,
        amount numeric(10, 2) NOT NULL, paid_at timestamptz NOT NULL DEFAULT now())""",
)
#: Debezium events per changed row, by statement kind (default replica identity).
EVENTS_PER_ROW = {"insert": 1, "update": 1, "delete": 2}
TIERS = ("bronze", "silver", "gold")
METHODS = ("card", "transfer", "wallet")
FIRST = ("Ada", "Alan", "Grace", "Edsger", "Barbara", "Ken", "Donald", "Frances", "Leslie")
LAST = ("Lovelace", "Turing", "Hopper", "Dijkstra", "Liskov", "Thompson", "Knuth", "Allen")


class Shop:
    """The source tables and the ids they hold, changed one transaction at a time."""

    def __init__(self, conn: psycopg.Connection[Any], rng: random.Random) -> None:
        self.conn = conn
        self.rng = rng
        self.customers: list[int] = []
        self.orders: dict[int, int] = {}  # order -> its payment (0: none)
        self.next_id = {table: 1 for table in TABLES}
        self.expected_events = 0
        self._pending = 0

    def create(self) -> None:
        for statement in SCHEMA:
            self.conn.execute(statement)

    def _run(self, kind: str, query: str, params: tuple[object, ...]) -> int:
        rows = self.conn.execute(query, params).rowcount
        self._pending += rows * EVENTS_PER_ROW[kind]
        return rows

    def _id(self, table: str) -> int:
        value = self.next_id[table]
        self.next_id[table] = value + 1
        return value

    def transaction(self, change: Callable[[], None]) -> None:
        """Run ``change`` in one transaction; its events count once it committed."""
        self._pending = 0
        with self.conn.transaction():
            change()
        self.expected_events += self._pending

    # -- the changes -------------------------------------------------------------------------

    def new_customer(self) -> None:
        cid = self._id("customers")
        name = f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}"
        email = f"{name.lower().replace(' ', '.')}{cid}@example.com"
        self._run(
            "insert",
            "INSERT INTO customers (id, name, email, tier) VALUES (%s, %s, %s, %s)",
            (cid, name, email, self.rng.choice(TIERS)),
        )
        self.customers.append(cid)

    def new_order(self) -> None:
        """An order and its payment: two tables, one transaction."""
        if not self.customers:
            return
        oid, pid = self._id("orders"), self._id("payments")
        amount = round(self.rng.uniform(5, 500), 2)
        self._run(
            "insert",
            "INSERT INTO orders (id, customer_id, status, amount) VALUES (%s, %s, 'paid', %s)",
            (oid, self.rng.choice(self.customers), amount),
        )
        self._run(
            "insert",
            "INSERT INTO payments (id, order_id, method, amount) VALUES (%s, %s, %s, %s)",
            (pid, oid, self.rng.choice(METHODS), amount),
        )
        self.orders[oid] = pid

    def ship_order(self) -> None:
        if self.orders:
            oid = self.rng.choice(list(self.orders))
            self._run("update", "UPDATE orders SET status = 'shipped' WHERE id = %s", (oid,))

    def change_customer(self) -> None:
        if self.customers:
            self._run(
                "update",
                "UPDATE customers SET tier = %s, updated_at = now() WHERE id = %s",
                (self.rng.choice(TIERS), self.rng.choice(self.customers)),
            )

    def cancel_order(self) -> None:
        """Refund and remove an order: a delete in two tables, one transaction."""
        if not self.orders:
            return
        oid = self.rng.choice(list(self.orders))
        self._run("delete", "DELETE FROM payments WHERE order_id = %s", (oid,))
        self._run("delete", "DELETE FROM orders WHERE id = %s", (oid,))
        del self.orders[oid]

    def reprice(self) -> None:
        """One statement that updates many rows (a discount on a customer's open orders)."""
        if self.customers:
            self._run(
                "update",
                "UPDATE orders SET amount = round(amount * 0.9, 2) "
                "WHERE customer_id = %s AND status = 'paid'",
                (self.rng.choice(self.customers),),
            )

    def step(self) -> None:
        """One random transaction, weighted like a shop's day."""
        change = self.rng.choices(
            (
                self.new_order,
                self.ship_order,
                self.change_customer,
                self.new_customer,
                self.cancel_order,
                self.reprice,
            ),
            weights=(40, 20, 15, 10, 10, 5),
        )[0]
        self.transaction(change)

    def seed(self, customers: int, orders: int) -> None:
        """The rows the connector's snapshot reads (before it starts: counted as reads)."""
        with self.conn.transaction():
            for _ in range(customers):
                self.new_customer()
            for _ in range(orders):
                self.new_order()
        self.expected_events = customers + 2 * orders
        self._pending = 0


class Workload:
    """Runs :meth:`Shop.step` at about ``rate`` transactions per second until stopped."""

    def __init__(self, shop: Shop, rate: float) -> None:
        self.shop = shop
        self.rate = rate
        self.transactions = 0
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="workload", daemon=True)

    def start(self) -> Workload:
        self._thread.start()
        return self

    def _loop(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                self.shop.step()
                self.transactions += 1
                next_at += interval
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as exc:  # reported by the pipeline's progress loop
            self.failure = exc

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
