"""The web page in a real headless Chromium (Debian's chromium + chromium-driver, driven by
selenium): a prediction renders a table and plots, a bad model name shows its error.

Screenshots are kept in ``test-artifacts/`` (or ``$PERFSEER_TEST_ARTIFACTS``).  Without a
chromium the test is skipped, except in CI (``CI`` set), where ``.ci/run`` installs it and a
missing browser is a failure.
"""

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("PERFSEER_TEST_ARTIFACTS", ROOT / "test-artifacts"))


def _browser_paths():
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return chrome, driver


@pytest.fixture(scope="module")
def server():
    from perfseer.serve.app import ServeConfig, create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(ServeConfig(jobs=1, job_time_s=120))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser():
    chrome, driver = _browser_paths()
    if not (chrome and driver):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromedriver are not installed; .ci/run installs them with apt-get")
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1200,1400"):
        opts.add_argument(arg)
    b = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    b.set_page_load_timeout(60)
    yield b
    b.quit()


def _wait(browser, condition, timeout=180):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page re-renders its table while a condition reads it: a stale element means "not yet"
    return WebDriverWait(browser, timeout, poll_frequency=0.2,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition)


def _fill(browser, element_id, text):
    el = browser.find_element("id", element_id)
    el.clear()
    el.send_keys(text)


def test_a_prediction_renders_a_table_and_plots(server, browser):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.get(server + "/")
    _wait(browser, lambda b: b.find_elements("css selector", "input[name=predictor]"))
    wanted = {"rtx3090-amp-nchw-pt240.infer", "rtx4090-amp-nchw-pt291.infer"}
    for cb in browser.find_elements("css selector", "input[name=predictor]"):
        if cb.is_selected() != (cb.get_attribute("value") in wanted):
            cb.click()
    _fill(browser, "model", "timm:resnet50")
    _fill(browser, "batch", "1,16,64")
    browser.find_element("id", "go").click()
    _wait(browser, lambda b: b.find_element("id", "result").is_displayed()
          or b.find_element("id", "error").is_displayed())
    browser.save_screenshot(str(ARTIFACTS / "predict-resnet50.png"))
    assert not browser.find_element("id", "error").is_displayed(), browser.find_element("id", "error").text
    rows = browser.find_elements("css selector", "#table tbody tr")
    cells = [[td.text for td in r.find_elements("tag name", "td")] for r in rows]
    assert len(cells) == 6
    assert {c[0] for c in cells} == {"1", "16", "64"}
    assert {c[1] for c in cells} == {"rtx3090/amp-nchw-pt240", "rtx4090/amp-nchw-pt291"}
    assert all(c[4].endswith("ms") and float(c[4].split()[0]) > 0 for c in cells)
    plots = browser.find_elements("css selector", "#plots svg.plot")
    assert len(plots) == 2  # latency and throughput
    assert len(plots[0].find_elements("css selector", "path[stroke-width='2']")) == 2  # one line per device
    assert "25.5" in browser.find_element("id", "summary").text  # ResNet-50's 25.56 M parameters


def test_an_invalid_model_shows_its_error_on_the_page(server, browser):
    browser.get(server + "/")
    _wait(browser, lambda b: b.find_elements("css selector", "input[name=predictor]"))
    _fill(browser, "model", "timm:no_such_model_anywhere")
    browser.find_element("id", "go").click()
    _wait(browser, lambda b: b.find_element("id", "error").is_displayed())
    browser.save_screenshot(str(ARTIFACTS / "predict-error.png"))
    text = browser.find_element("id", "error").text
    assert "no_such_model_anywhere" in text and "Fix:" in text
    assert not browser.find_element("id", "result").is_displayed()


def test_the_page_starts_on_a_gpu_and_keeps_ticked_predictors_beside_typed_devices(server, browser):
    browser.get(server + "/")
    _wait(browser, lambda b: b.find_elements("css selector", "input[name=predictor]"))
    ticked = {cb.get_attribute("value") for cb in browser.find_elements("css selector", "input[name=predictor]")
              if cb.is_selected()}
    assert ticked and all(name.startswith("rtx3090") for name in ticked)  # a GPU, never the CPU cards
    _fill(browser, "model", "example:resnet50")
    _fill(browser, "batch", "1,16")
    _fill(browser, "devices", "rtx4090, l4")
    browser.find_element("id", "batch").click()  # leaving the field ticks the typed devices' predictors
    _wait(browser, lambda b: b.find_element("css selector", "input[value='rtx4090-amp-nchw-pt291.infer']").is_selected())
    browser.find_element("id", "go").click()
    _wait(browser, lambda b: b.find_element("id", "result").is_displayed()
          or b.find_element("id", "error").is_displayed())
    browser.save_screenshot(str(ARTIFACTS / "predict-typed-devices.png"))
    assert not browser.find_element("id", "error").is_displayed(), browser.find_element("id", "error").text
    rows = browser.find_elements("css selector", "#table tbody tr")
    devices = {r.find_elements("tag name", "td")[1].text for r in rows}
    assert "l4" in devices and "rtx4090/amp-nchw-pt291" in devices and any(d.startswith("rtx3090") for d in devices)
    # compact rows: the long reasons stay behind "details" until asked for
    assert all(len(r.text) < 200 for r in rows)
    opened = rows[0].find_element("tag name", "summary")
    opened.click()
    assert "basis: " in rows[0].find_element("tag name", "details").text


def test_which_gpu_ranks_the_typed_gpus_by_energy_per_sample(server, browser):
    browser.get(server + "/")
    _fill(browser, "cmp-model", "example:resnet18")
    _fill(browser, "cmp-batch", "8")
    _fill(browser, "cmp-devices", "l4, a10g, h100-sxm")
    browser.find_element("id", "cmp-energy").click()
    browser.find_element("css selector", "#cmp-rank option[value=energy]").click()
    browser.find_element("id", "cmp-go").click()
    _wait(browser, lambda b: b.find_element("id", "cmp-table").is_displayed()
          or b.find_element("id", "cmp-error").is_displayed())
    browser.save_screenshot(str(ARTIFACTS / "compare-energy.png"))
    assert not browser.find_element("id", "cmp-error").is_displayed(), browser.find_element("id", "cmp-error").text
    heads = [th.text for th in browser.find_elements("css selector", "#cmp-table thead th")]
    assert {"GPU", "ms / step", "samples / s", "W", "J / sample", "fits", "basis", "seen"} <= set(heads)
    rows = [[td.text for td in r.find_elements("tag name", "td")]
            for r in browser.find_elements("css selector", "#cmp-table tbody tr")]
    assert [r[0] for r in rows] == ["1", "2", "3"]
    assert all(len(r[heads.index("basis")]) <= 24 and r[heads.index("seen")] in ("yes", "no", "-") for r in rows)
    per_sample = [float(r[heads.index("J / sample")]) for r in rows]
    assert per_sample == sorted(per_sample) and per_sample[0] > 0
    assert all(float(r[heads.index("ms / step")]) > 0 for r in rows)


def test_the_energy_box_adds_power_energy_and_utilisation_columns(server, browser):
    browser.get(server + "/")
    _wait(browser, lambda b: b.find_elements("css selector", "input[name=predictor]"))
    _fill(browser, "model", "example:resnet18")
    _fill(browser, "batch", "8")
    browser.find_element("id", "energy").click()
    browser.find_element("id", "go").click()
    _wait(browser, lambda b: b.find_element("id", "result").is_displayed()
          or b.find_element("id", "error").is_displayed())
    assert not browser.find_element("id", "error").is_displayed(), browser.find_element("id", "error").text
    heads = [th.text for th in browser.find_elements("css selector", "#table thead th")]
    assert {"W", "J / sample", "util %"} <= set(heads)
    rows = [[td.text for td in r.find_elements("tag name", "td")]
            for r in browser.find_elements("css selector", "#table tbody tr")]
    assert rows and all(float(r[heads.index("W")]) > 0 and 0 <= float(r[heads.index("util %")]) <= 100 for r in rows)


def test_several_gpus_show_compute_communication_and_bubble_per_row(server, browser):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.get(server + "/")
    _wait(browser, lambda b: b.find_elements("css selector", "input[name=predictor]"))
    _fill(browser, "model", "example:resnet18")
    _fill(browser, "batch", "32,64")
    _fill(browser, "devices", "a100-40gb")
    _fill(browser, "gpus", "4")
    browser.find_element("css selector", "#parallel option[value=zero2]").click()
    browser.find_element("id", "go").click()
    _wait(browser, lambda b: b.find_element("id", "result").is_displayed()
          or b.find_element("id", "error").is_displayed())
    browser.save_screenshot(str(ARTIFACTS / "predict-several-gpus.png"))
    assert not browser.find_element("id", "error").is_displayed(), browser.find_element("id", "error").text
    assert "4 GPUs: ZeRO-2 4" in browser.find_element("id", "result-title").text
    heads = [th.text for th in browser.find_elements("css selector", "#table thead th")]
    assert {"per GPU", "step ms", "compute", "comm", "bubble"} <= set(heads)
    rows = [[td.text for td in r.find_elements("tag name", "td")]
            for r in browser.find_elements("css selector", "#table tbody tr")]
    assert [r[0] for r in rows] == ["32", "64"] and [r[heads.index("per GPU")] for r in rows] == ["8", "16"]
    for r in rows:
        step, compute, comm = (float(r[heads.index(k)]) for k in ("step ms", "compute", "comm"))
        assert comm > 0 and float(r[heads.index("bubble")]) == 0
        assert step == pytest.approx(compute + comm, rel=0.01)  # three significant digits shown
    assert all(len(r.text) < 200 for r in browser.find_elements("css selector", "#table tbody tr"))  # compact
    # memory per GPU, simulated (inference: the ONNX example has no backward pass)
    browser.find_element("css selector", "#phase option[value=infer]").click()
    browser.find_element("id", "gpus-memory").click()
    browser.find_element("id", "go").click()
    _wait(browser, lambda b: "memory / GPU" in [th.text for th in b.find_elements("css selector", "#table thead th")]
          or b.find_element("id", "error").is_displayed())
    assert not browser.find_element("id", "error").is_displayed(), browser.find_element("id", "error").text
    heads = [th.text for th in browser.find_elements("css selector", "#table thead th")]
    mem = [r.find_elements("tag name", "td")[heads.index("memory / GPU")].text
           for r in browser.find_elements("css selector", "#table tbody tr")]
    assert len(mem) == 2 and all(m.endswith("GiB") and float(m.split()[0]) > 0 for m in mem), mem
    # a layout that cannot run: the service's refusal and its fix on the page
    _fill(browser, "gpus", "16")
    browser.find_element("id", "go").click()
    _wait(browser, lambda b: b.find_element("id", "error").is_displayed())
    text = browser.find_element("id", "error").text
    assert "16 GPUs per node" in text and "Fix:" in text and '"nodes" 2' in text
