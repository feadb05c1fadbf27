"""Posts with pictures, as a phone sends them: a JPEG straight from a camera (EXIF with GPS, the camera's make, model
and serial number, an orientation tag) uploaded with curl and through the form in Chromium; what Foyer serves back
read with Pillow. Refusals store nothing and do not make the server's memory jump."""
import io
import json
import os
import pathlib
import subprocess
import uuid

from PIL import Image

from conftest import DEMO_EMAIL, DEMO_PASSWORD, REPO, wait_for_page, wait_until
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import session_token
from test_offline_browser import controlled_page
from test_posts_browser import sign_in

SCREENSHOTS = os.environ.get("FOYER_SCREENSHOTS")
SECRETS = [b"Exif\x00\x00", b"FoyerCam", b"Model X 3000", b"SN-0042-SECRET", b"http://ns.adobe.com/xap"]


def camera_jpeg(width=1200, height=900, orientation=6) -> bytes:
    """A photo as a phone stores it: pixels as the sensor read them (red in the stored top-left quarter) and an
    orientation tag saying how to turn them; EXIF with where it was taken and with what."""
    image = Image.new("RGB", (width, height), (30, 80, 200))
    image.paste((255, 0, 0), (0, 0, width // 4, height // 4))
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "FoyerCam"
    exif[0x0110] = "Model X 3000"
    exif.get_ifd(0x8769)[0xA431] = "SN-0042-SECRET"  # BodySerialNumber
    exif.get_ifd(0x8825).update({1: "N", 2: (52.0, 22.0, 1.5), 3: "E", 4: (4.0, 53.0, 2.0)})
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif.tobytes(), quality=92)
    data = out.getvalue()
    assert Image.open(io.BytesIO(data)).getexif().get_ifd(0x8825), "the test photo carries GPS"
    return data


def encoded(image: Image.Image, kind: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, kind, **options)
    return out.getvalue()


def upload(url: str, token: str, path: pathlib.Path, title: str, alt: str = "", method: str = "POST", target: str = "/api/v1/posts"):
    """curl -F, as a developer tries it; (status, JSON body)."""
    result = subprocess.run(
        ["curl", "-sS", "--max-time", "30", "-X", method, "-H", f"Authorization: Bearer {token}", "-H", "Accept: application/json",
         "-F", f"title={title}", "-F", f"alt={alt}", "-F", f"picture=@{path}", "-w", "\n%{http_code}", url + target],
        capture_output=True, check=True,
    )
    body, _, status = result.stdout.rpartition(b"\n")
    return int(status), json.loads(body) if body.strip() else None


def fetch(url: str, accept: str = "*/*", extra=()) -> tuple[int, dict, bytes]:
    result = subprocess.run(["curl", "-sS", "--max-time", "10", "-D", "-", "-H", f"Accept: {accept}", *extra, url], capture_output=True, check=True)
    head, _, body = result.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def assert_clean_and_upright(data: bytes, kind: str, longest: int):
    image = Image.open(io.BytesIO(data))
    image.load()
    assert image.format == kind, image.format
    assert not image.getexif(), f"EXIF in the served {kind}: {dict(image.getexif())}"
    assert "exif" not in image.info and "xmp" not in image.info and "icc_profile" not in image.info, image.info.keys()
    for secret in SECRETS:
        assert secret not in data, f"{secret!r} in the served {kind}"
    assert max(image.size) <= longest, image.size
    assert image.size[1] > image.size[0], f"upright is portrait: {image.size}"
    # The stored top-left quarter, turned as orientation 6 says (90° clockwise), is the top-right one.
    rgb = image.convert("RGB")
    width, height = rgb.size
    red, _, blue = rgb.getpixel((width - 4, 4))
    assert red > 200 and blue < 80, f"top-right {rgb.getpixel((width - 4, 4))}"
    red, _, blue = rgb.getpixel((4, 4))
    assert red < 100 and blue > 150, f"top-left {rgb.getpixel((4, 4))}"


def test_a_camera_photo_through_the_api_is_kept_upright_and_without_any_of_its_metadata(server, tmp_path):
    token = session_token(server)
    photo = tmp_path / "IMG_0001.JPG"
    photo.write_bytes(camera_jpeg())
    status, post = upload(server.url, token, photo, "From a phone", alt="A red corner, top right")
    assert status == 201, post
    picture = post["picture"]
    assert (picture["width"], picture["height"]) == (900, 1200), "turned upright, never enlarged"
    assert picture["alt"] == "A red corner, top right"
    assert picture["url"].startswith(server.url + "/pictures/") and picture["thumbnail_url"].endswith("/thumbnail")

    for url, longest in [(picture["url"], 1600), (picture["thumbnail_url"], 400)]:
        for accept, kind, content_type in [("*/*", "JPEG", "image/jpeg"), ("image/avif,image/webp,*/*", "WEBP", "image/webp")]:
            status, headers, body = fetch(url, accept)
            assert status == 200 and headers["content-type"] == content_type
            assert headers["content-length"] == str(len(body))
            assert headers["cache-control"] == "public, max-age=31536000, immutable"
            assert headers["x-content-type-options"] == "nosniff" and headers["vary"] == "Accept"
            assert_clean_and_upright(body, kind, longest)
            status, _, body = fetch(url, accept, ["-H", f"If-None-Match: {headers['etag']}"])
            assert status == 304 and body == b""
    thumbnail = Image.open(io.BytesIO(fetch(picture["thumbnail_url"])[2]))
    assert thumbnail.size == (300, 400) == (picture["width"] // 3, picture["height"] // 3)

    # The list and the post page show it; deleting the post deletes it.
    page = fetch(f"{server.url}/posts/{post['id']}", "text/html")[2].decode()
    assert f'src="{picture["url"].removeprefix(server.url)}"' in page and 'width="900" height="1200"' in page
    deleted = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "DELETE", "-H", f"Authorization: Bearer {token}",
                              f"{server.url}/api/v1/posts/{post['id']}"], capture_output=True, text=True, check=True)
    assert deleted.stdout == "204"
    for url in (picture["url"], picture["thumbnail_url"]):
        assert fetch(url)[0] == 404


def test_png_webp_and_heic_are_taken_and_served_as_jpeg_or_webp(server, tmp_path):
    token = session_token(server)
    transparent = Image.new("RGBA", (800, 600), (0, 160, 0, 0))
    transparent.paste((0, 160, 0, 255), (0, 0, 400, 600))
    files = {
        "drawing.png": encoded(transparent, "PNG"),
        "screenshot.webp": encoded(Image.new("RGB", (2400, 1200), (250, 200, 0)), "WEBP", quality=80),
        # Made by libvips' heifsave (HEVC) from a 320 × 240 picture: what an iPhone sends, in small.
        "IMG_0002.HEIC": (REPO / "Tests/Interop/fixtures/red-corner.heic").read_bytes(),
    }
    sizes = {"drawing.png": (800, 600), "screenshot.webp": (1600, 800), "IMG_0002.HEIC": (320, 240)}
    for name, data in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        status, post = upload(server.url, token, path, f"A {name}")
        assert status == 201, (name, post)
        assert (post["picture"]["width"], post["picture"]["height"]) == sizes[name], name
        served = Image.open(io.BytesIO(fetch(post["picture"]["url"])[2]))
        assert served.format == "JPEG" and served.size == sizes[name]
    # The transparent half of the PNG is white in the JPEG, not black.
    drawing = [post for post in json.loads(fetch(server.url + "/api/v1/posts?per_page=100")[2]) if post["title"] == "A drawing.png"][0]
    served = Image.open(io.BytesIO(fetch(drawing["picture"]["url"])[2])).convert("RGB")
    assert min(served.getpixel((700, 300))) > 240 and served.getpixel((100, 300))[1] > 120


def status_memory(pid: int) -> dict:
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) // 1024  # MiB
    return fields


def test_what_is_not_a_picture_or_too_large_is_refused_storing_nothing_and_memory_does_not_jump(own_server, tmp_path):
    server = own_server
    token = session_token(server)
    warm = tmp_path / "warm.jpg"
    warm.write_bytes(camera_jpeg())
    assert upload(server.url, token, warm, "Warm-up")[0] == 201
    before = status_memory(server.process.pid)
    count = len(json.loads(fetch(server.url + "/api/v1/posts?per_page=100")[2]))

    bomb = Image.new("1", (20_000, 20_000))  # 400 megapixels: 1.2 GB as RGB, a few kilobytes as a PNG of zeros
    cases = {
        "cat.png": (b"<!DOCTYPE html><html><body><script>alert(1)</script></body></html>", 422, "is not a JPEG, PNG, WebP or HEIC picture"),
        "cut.jpg": (camera_jpeg()[:6000], 422, "could not be read as a JPEG picture"),
        "bomb.png": (encoded(bomb, "PNG", optimize=True), 422, "is 20000 × 20000 pixels, more than 50 megapixels"),
        "huge.jpg": (camera_jpeg() + os.urandom(25 * 1000 * 1000), 413, None),
    }
    for name, (data, expected, words) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        status, body = upload(server.url, token, path, f"Refused {name}")
        assert status == expected, (name, status, body)
        if words:
            assert body["errors"]["picture"] == [words] if name != "cut.jpg" else body["errors"]["picture"][0].startswith(words), body
        else:
            assert "larger than" in body["error"], body
    assert len(bomb.tobytes()) > 40_000_000 > len(cases["bomb.png"][0]) * 100

    after = status_memory(server.process.pid)
    listed = json.loads(fetch(server.url + "/api/v1/posts?per_page=100")[2])
    assert len(listed) == count and not [post for post in listed if post["title"].startswith("Refused")], "nothing stored"
    # Decoding the bomb would take over a gigabyte; holding the 25 MB upload, 25 MB.
    assert after["VmHWM"] - before["VmHWM"] < 64, (before, after)


def test_the_form_in_chromium_previews_uploads_and_shows_the_picture_upright(server, browser, tmp_path):  # noqa: F811
    photo = tmp_path / "IMG_0003.JPG"
    photo.write_bytes(camera_jpeg())
    # A reader with the list open: the new post arrives there live, thumbnail and all.
    reader = browser.new_page()
    reader.goto(server.url + "/posts")
    wait_for_page(reader, "document.querySelector('turbo-stream-source') !== null && window.Turbo !== undefined")
    page = browser.new_page(viewport={"width": 390, "height": 844})
    sign_in(page, server)
    page.goto(server.url + "/posts/new")
    wait_for_page(page, "window.Turbo !== undefined")
    title = f"Photo from Chromium {uuid.uuid4().hex[:6]}"
    page.fill("input[name=title]", title)
    page.fill("input[name=alt]", "Harbour at dawn")
    assert page.locator("input[name=picture]").get_attribute("accept").startswith("image/")
    page.set_input_files("input[name=picture]", str(photo))
    wait_for_page(page, "document.querySelector('[data-picture-preview] img')?.complete && document.querySelector('[data-picture-preview] img').naturalWidth > 0")
    page.click("main button[type=submit]")
    page.locator("article.post img.post-picture").wait_for()
    image = page.locator("article.post img.post-picture")
    wait_for_page(page, "document.querySelector('img.post-picture').complete && document.querySelector('img.post-picture').naturalWidth > 0")
    assert image.get_attribute("alt") == "Harbour at dawn"
    assert (image.get_attribute("width"), image.get_attribute("height")) == ("900", "1200")
    # What the browser shows is upright: its top-right corner red.
    source = page.evaluate("document.querySelector('img.post-picture').currentSrc")
    status, headers, body = fetch(source, "image/avif,image/webp,*/*")
    assert status == 200
    assert_clean_and_upright(body, "WEBP" if headers["content-type"] == "image/webp" else "JPEG", 1600)

    live_row = reader.locator("ol.posts li", has_text=title)
    live_row.locator("img.row-picture").wait_for()
    assert live_row.locator("img.row-picture").get_attribute("alt") == "Harbour at dawn"
    reader.close()

    page.goto(server.url + "/posts")
    row = page.locator("ol.posts li", has_text=title)
    row.locator("img.row-picture").wait_for()
    assert row.locator("img.row-picture").get_attribute("alt") == "Harbour at dawn"
    if SCREENSHOTS:
        page.screenshot(path=f"{SCREENSHOTS}/posts-with-pictures-390.png")

    # A file that is not a picture: the form again, with the message beside the field and the title kept.
    page.goto(server.url + "/posts/new")
    page.fill("input[name=title]", "Not a picture")
    fake = tmp_path / "holiday.jpg"
    fake.write_bytes(b"<html>not a picture</html>")
    page.set_input_files("input[name=picture]", str(fake))
    page.click("main button[type=submit]")
    page.locator("#picture-error").wait_for()
    assert page.locator("#picture-error").inner_text() == "Picture is not a JPEG, PNG, WebP or HEIC picture"
    assert page.locator("input[name=title]").input_value() == "Not a picture"

    # Over the limit: said at once, before megabytes are sent; the browser does not submit the form.
    big = tmp_path / "big.jpg"
    big.write_bytes(camera_jpeg() + bytes(21 * 1024 * 1024))
    page.set_input_files("input[name=picture]", str(big))
    page.locator("#picture-client-error").wait_for()
    assert page.locator("#picture-client-error").inner_text().startswith("This picture is 21.0 MB; pictures may be at most 20 MB.")
    assert page.evaluate("document.querySelector('input[name=picture]').validity.valid") is False
    page.close()


def test_a_kept_post_page_shows_its_picture_offline(server, browser, tmp_path):  # noqa: F811
    token = session_token(server)
    photo = tmp_path / "offline.jpg"
    photo.write_bytes(camera_jpeg())
    status, post = upload(server.url, token, photo, f"Read on the train {uuid.uuid4().hex[:6]}", alt="Red corner")
    assert status == 201
    context, page = controlled_page(browser, server, DEMO_EMAIL, DEMO_PASSWORD)
    page.goto(f"{server.url}/posts/{post['id']}")
    wait_for_page(page, "document.querySelector('img.post-picture').complete && document.querySelector('img.post-picture').naturalWidth > 0")
    wait_until(lambda: page.evaluate("caches.open('foyer-pictures').then(cache => cache.keys()).then(keys => keys.length)") > 0,
               what="the picture to be kept")
    context.set_offline(True)
    page.goto(f"{server.url}/posts/{post['id']}")
    page.locator("#offline-notice").wait_for()
    wait_for_page(page, "document.querySelector('img.post-picture').complete")
    assert page.evaluate("document.querySelector('img.post-picture').naturalWidth") > 0, "the picture shows offline"
    context.close()


def test_a_post_written_offline_with_a_picture_waits_with_it_then_is_published_with_it(server, browser, tmp_path):  # noqa: F811
    photo = tmp_path / "tunnel.jpg"
    photo.write_bytes(camera_jpeg())
    context, page = controlled_page(browser, server, DEMO_EMAIL, DEMO_PASSWORD)
    for path in ["/posts", "/posts/new"]:
        page.goto(server.url + path)
        page.locator("main h1").first.wait_for()
    context.set_offline(True)
    title = f"Photo from a tunnel {uuid.uuid4().hex[:6]}"
    page.goto(server.url + "/posts/new")
    page.fill("input[name=title]", title)
    page.fill("input[name=alt]", "Tunnel lights")
    page.set_input_files("input[name=picture]", str(photo))
    page.click("main button[type=submit]")
    page.wait_for_url(server.url + "/posts")
    page.locator("ol.posts > li", has_text=title).locator(".waiting-badge").wait_for()
    context.set_offline(False)
    wait_until(lambda: page.locator(".waiting-write").count() == 0, seconds=15, what="the post to be sent")
    posts = json.loads(fetch(server.url + "/api/v1/posts?per_page=100")[2])
    sent = [post for post in posts if post["title"] == title]
    assert len(sent) == 1, "sent once"
    picture = sent[0]["picture"]
    assert picture and picture["alt"] == "Tunnel lights" and (picture["width"], picture["height"]) == (900, 1200), picture
    context.close()
