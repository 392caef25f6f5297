// Helpers shared by the report pages' scripts (replay and compare): number formatting, SVG and
// HTML element builders that only ever set text with textContent, axis steps and marker shapes.
var ctxhostReport = (function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  function fmt(n) {
    var s = String(Math.round(n)), out = '';
    for (var i = 0; i < s.length; i++) {
      if (i > 0 && (s.length - i) % 3 === 0 && s[i - 1] !== '-') { out += ','; }
      out += s[i];
    }
    return out;
  }
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { if (Object.prototype.hasOwnProperty.call(attrs, k)) { e.setAttribute(k, attrs[k]); } }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function html(name, cls, text, parent) {
    var e = document.createElement(name);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = text; }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function niceStep(max) {
    var raw = max / 5, p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10)), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
  }
  function triangle(cx, cy, s) {
    return 'M' + (cx - s) + ',' + (cy - s) + 'L' + (cx + s) + ',' + (cy - s) + 'L' + cx + ',' + (cy + s * 0.9) + 'Z';
  }
  function cross(cx, cy, s) {
    return 'M' + (cx - s) + ',' + (cy - s) + 'L' + (cx + s) + ',' + (cy + s) + 'M' + (cx + s) + ',' + (cy - s) + 'L' + (cx - s) + ',' + (cy + s);
  }

  return { NS: NS, fmt: fmt, el: el, html: html, niceStep: niceStep, triangle: triangle, cross: cross };
})();
