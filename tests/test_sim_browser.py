"""The HTML report in a real browser: headless Debian Chromium driven by Selenium.

The page must load from a file without console errors, with its plots decoded (each
image's ``naturalWidth`` > 0) and its tables present. Skipped, saying why, only where
the chromium binary (or its driver) is absent.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _binaries() -> tuple[str, str] | None:
    chromium = str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium")
    driver = str(CHROMEDRIVER) if CHROMEDRIVER.exists() else shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import kvbudget
    from kvbudget.sim import simulate
    from kvbudget.sim.report_html import write_html
    from kvbudget.sim.simulation import engine_flags_for

    kwargs = {"kv_budget": "4GiB", "host_budget": "8GiB", "max_seq_len": 16384}
    deployment = kvbudget.resolve_deployment(**kwargs)  # type: ignore[arg-type]
    plan = kvbudget.build_plan(deployment)
    flags = engine_flags_for(deployment)
    result = simulate(plan, limit=60, rate_scale=20.0, engine_flags=flags)
    return write_html(result, tmp_path_factory.mktemp("html") / "report.html")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    found = _binaries()
    if found is None:
        pytest.skip("chromium or chromedriver is not installed (Debian: apt-get install chromium)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=found[1]), options=options)
    yield driver
    driver.quit()


def test_the_report_loads_without_console_errors(browser: Any, report: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(report.as_uri())
    assert browser.title.startswith("kvbudget simulate")
    logs = browser.get_log("browser")
    errors = [entry for entry in logs if entry.get("level") in ("SEVERE", "ERROR")]
    assert errors == [], errors
    images = browser.find_elements(By.CSS_SELECTOR, "img.plot")
    assert len(images) == 5
    for img in images:
        # the PNG decoded: a broken data URL leaves naturalWidth at 0
        assert browser.execute_script("return arguments[0].naturalWidth", img) > 100
        assert img.is_displayed()
    table = browser.find_element(By.ID, "summary")
    headers = [th.text for th in table.find_elements(By.TAG_NAME, "th")]
    assert headers == [
        "metric",
        "kvbudget",
        "doubled-host",
        "equal-split",
        "target-geometry-draft",
        "no-host",
    ]
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) >= 10
    assert "Llama-3.1-8B" in browser.find_element(By.ID, "plan").text
    assert "vllm" in browser.find_element(By.ID, "engine-flags").text
