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
