// A few DOM helpers for the views (no React: the views are small and re-rendered whole).

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  text = ''
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text) {
    node.textContent = text;
  }
  return node;
}

export function button(
  label: string,
  className: string,
  title: string,
  onClick: () => void
): HTMLButtonElement {
  const b = el('button', `jp-Button jp-mod-styled ${className}`, label);
  b.type = 'button';
  b.title = title;
  b.addEventListener('click', onClick);
  return b;
}

/** A small inline SVG line (`class="dra-spark"`) of the path `d` in a width x height box. */
export function sparkline(d: string, width: number, height: number, title: string): SVGSVGElement {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'dra-spark');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', title);
  const tip = document.createElementNS(ns, 'title');
  tip.textContent = title;
  svg.append(tip);
  if (d) {
    const path = document.createElementNS(ns, 'path');
    path.setAttribute('d', d);
    svg.append(path);
  }
  return svg;
}
