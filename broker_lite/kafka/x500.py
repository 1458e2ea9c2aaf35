"""Reading X.509 DER: the subject as RFC 2253 text, exactly as Kafka's default principal
builder names it, and the end of the validity (the broker warns of its own expiry).

Kafka's ``DefaultKafkaPrincipalBuilder`` (``ssl.principal.mapping.rules=DEFAULT``)
takes ``X500Principal.getName()``: the RDNs last first, joined by ``,``; the
values of a multi-valued RDN joined by ``+``; the keywords CN, C, L, ST, O,
OU, STREET, DC and UID, any other attribute as its dotted OID with the
value's DER encoding in hex (``1.2.840.113549.1.9.1=#1611...``); and in the
values ``, = + < > # ; " \\`` escaped with a backslash, NUL as ``\\00``, and
leading or trailing spaces escaped.  Escaping is what keeps a certificate whose
single CN is ``alice,O=team-a`` from taking the principal of the certificate
``O=team-a/CN=alice`` (``CN=alice\\,O\\=team-a`` against ``CN=alice,O=team-a``).

The subject is read from the certificate's DER (Python's ``getpeercert()``
dictionary loses the value types and the attributes' OIDs, which the hex
form needs).
"""

from __future__ import annotations

import datetime

from sparklog.errors import SslAuthenticationFailedError

#: RFC 2253's keywords (Java's X500Principal uses exactly these)
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
#: DER string tags Java renders as text, and their charsets
_STRING_TAGS = {
    0x0C: "utf-8",  # UTF8String
    0x13: "ascii",  # PrintableString
    0x14: "latin-1",  # TeletexString
    0x16: "ascii",  # IA5String
    0x1B: "latin-1",  # GeneralString
    0x1E: "utf-16-be",  # BMPString
}
_ESCAPED = set(',=+<>#;"\\')
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at ``pos``."""
    if pos + 2 > len(data):
        raise SslAuthenticationFailedError("certificate DER ends inside an element header")
    tag, first = data[pos], data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise SslAuthenticationFailedError("certificate DER has an unsupported length form")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise SslAuthenticationFailedError("certificate DER element runs past its end")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in [start, end)."""
    out = []
    pos = start
    while pos < end:
        tag, content, stop = _tlv(data, pos)
        out.append((tag, pos, content, stop))
        pos = stop
    return out


def _oid(raw: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in raw:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise SslAuthenticationFailedError("certificate DER has an empty attribute OID")
    first = arcs[0]
    head = [first // 40, first % 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])


def escape_value(text: str) -> str:
    """One attribute value escaped as Java's ``AVA.toRFC2253String`` escapes it."""
    escaped = []
    for char in text:
        if char in _ESCAPED:
            escaped.append("\\" + char)
        elif char == "\x00":
            escaped.append("\\00")
        else:
            escaped.append(char)
    # leading and trailing spaces (and CRs) are escaped, counted on the escaped text as Java does
    lead = 0
    while lead < len(escaped) and escaped[lead] in (" ", "\r"):
        lead += 1
    trail = len(escaped) - 1
    while trail >= 0 and escaped[trail] in (" ", "\r"):
        trail -= 1
    return "".join("\\" + part if i < lead or i > trail else part for i, part in enumerate(escaped))


def _attribute(data: bytes, start: int, end: int) -> str:
    parts = _children(data, start, end)
    if len(parts) != 2 or parts[0][0] != _OID:
        raise SslAuthenticationFailedError("certificate subject attribute is not (OID, value)")
    _, _, oid_start, oid_end = parts[0]
    tag, element, content, stop = parts[1]
    oid = _oid(data[oid_start:oid_end])
    keyword = _KEYWORDS.get(oid)
    charset = _STRING_TAGS.get(tag)
    if keyword is None or charset is None:
        return f"{keyword or oid}=#{data[element:stop].hex()}"
    return f"{keyword}={escape_value(data[content:stop].decode(charset, 'replace'))}"


def _tbs_fields(der: bytes) -> list[tuple[int, int, int, int]]:
    """serialNumber, signature, issuer, validity, subject, ... of the tbsCertificate."""
    tag, start, end = _tlv(der, 0)
    if tag != _SEQUENCE:
        raise SslAuthenticationFailedError("certificate DER is not a SEQUENCE")
    tag, start, end = _tlv(der, start)
    if tag != _SEQUENCE:
        raise SslAuthenticationFailedError("certificate DER has no tbsCertificate")
    fields = _children(der, start, end)
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    if len(fields) < 5 or fields[3][0] != _SEQUENCE or fields[4][0] != _SEQUENCE:
        raise SslAuthenticationFailedError("certificate DER has no validity or subject")
    return fields


def not_after(der: bytes) -> datetime.datetime:
    """The end of a DER X.509 certificate's validity (UTC)."""
    _, _, start, end = _tbs_fields(der)[3]
    times = _children(der, start, end)
    if len(times) != 2:
        raise SslAuthenticationFailedError("certificate validity is not (notBefore, notAfter)")
    tag, _, content, stop = times[1]
    text = der[content:stop].decode("ascii", "replace")
    formats = {0x17: "%y%m%d%H%M%SZ", 0x18: "%Y%m%d%H%M%SZ"}  # UTCTime, GeneralizedTime
    try:
        when = datetime.datetime.strptime(text, formats[tag])
    except (KeyError, ValueError):
        raise SslAuthenticationFailedError(
            f"certificate notAfter {text!r} cannot be read"
        ) from None
    return when.replace(tzinfo=datetime.UTC)


def subject_rfc2253(der: bytes) -> str:
    """The subject of a DER X.509 certificate as ``X500Principal.getName()`` writes it."""
    _, _, subject_start, subject_end = _tbs_fields(der)[4]
    rdns = []
    for rdn_tag, _, rdn_start, rdn_end in _children(der, subject_start, subject_end):
        if rdn_tag != _SET:
            raise SslAuthenticationFailedError("certificate subject RDN is not a SET")
        rdns.append(
            "+".join(
                _attribute(der, a_start, a_end)
                for a_tag, _, a_start, a_end in _children(der, rdn_start, rdn_end)
                if a_tag == _SEQUENCE
            )
        )
    return ",".join(reversed(rdns))
